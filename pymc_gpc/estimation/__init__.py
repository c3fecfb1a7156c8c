"""``pymc_gpc.fit``'s parts, by role: the model split into its GP evidence terms and the
rest (``objective``), type-II ML and MAP-II by L-BFGS-B (``type2``), EM-EP (``em_ep``),
and what a fit returns (``result``). ``point_estimates.fit`` chooses among them."""
