"""Gold: windowed aggregates and dimension joins for analysts."""
