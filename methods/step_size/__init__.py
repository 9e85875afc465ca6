"""step_size schemes; see workbench.families for the contract."""
