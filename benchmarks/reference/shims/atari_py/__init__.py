"""Stand-in for atari_py (the reference's emulator binding, gym[atari]==0.17.3's dependency) over
ale-py, the emulator sgi-lab uses: atari_py no longer builds and ships no ROMs.

Only what ``src/rlpyt_atari_env.py`` calls, with atari_py's conventions where ale-py's differ:
byte-string setting names, integer action sets as numpy arrays, and grayscale screens of shape
``(height, width, 1)``. The emulator itself is ale-py's (0.12), not atari_py's ALE 0.6.
"""

import ale_py
import ale_py.roms
import numpy as np

ale_py.ALEInterface.setLoggerMode(ale_py.LoggerMode.Error)


def get_game_path(game_name):
    """Path of the ROM ale-py ships for an atari_py game name (``"pong"``, ``"ms_pacman"``)."""
    return str(ale_py.roms.get_rom_path(game_name))


def _key(name):
    return name.decode() if isinstance(name, bytes) else name


class ALEInterface:
    def __init__(self):
        self._ale = ale_py.ALEInterface()

    def setInt(self, key, value):
        self._ale.setInt(_key(key), int(value))

    def setFloat(self, key, value):
        self._ale.setFloat(_key(key), float(value))

    def setBool(self, key, value):
        self._ale.setBool(_key(key), bool(value))

    def getInt(self, key):
        return self._ale.getInt(_key(key))

    def loadROM(self, rom_file):
        self._ale.loadROM(_key(rom_file))

    def act(self, action):
        return self._ale.act(ale_py.Action(int(action)))

    def game_over(self):
        return self._ale.game_over()

    def reset_game(self):
        self._ale.reset_game()

    def lives(self):
        return self._ale.lives()

    def getEpisodeFrameNumber(self):
        return self._ale.getEpisodeFrameNumber()

    def getMinimalActionSet(self):
        return np.array([a.value for a in self._ale.getMinimalActionSet()], dtype=np.int32)

    def getLegalActionSet(self):
        return np.array([a.value for a in self._ale.getLegalActionSet()], dtype=np.int32)

    def getScreenGrayscale(self, screen_data=None):
        height, width = self._ale.getScreenDims()
        if screen_data is None:
            screen_data = np.empty((height, width, 1), dtype=np.uint8)
        self._ale.getScreenGrayscale(screen_data.reshape(height, width))
        return screen_data

    def getScreenRGB(self, screen_data=None):
        height, width = self._ale.getScreenDims()
        if screen_data is None:
            screen_data = np.empty((height, width, 3), dtype=np.uint8)
        self._ale.getScreenRGB(screen_data)
        return screen_data
