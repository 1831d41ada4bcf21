"""Silver: typed, checked and deduplicated tables refined from bronze."""
