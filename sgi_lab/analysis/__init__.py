"""Analysis models behind the notebooks: ablations, goal rewards, representations, run reports."""
