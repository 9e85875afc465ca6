"""advantage schemes; see workbench.families for the contract."""
