"""Everything RoCE in one package: the field declaration (:mod:`fabricops.model.roce_schema`) and what is
generated from it (:mod:`fabricops.roce.generate`). Kept free of imports so submodules stay independent."""
