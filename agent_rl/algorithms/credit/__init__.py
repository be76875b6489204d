"""Turn-level and branch-based credit assignment (registry ``credit``); entries arrive with issue 9."""
