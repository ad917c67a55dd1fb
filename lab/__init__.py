"""The research machinery: ablations, the reproduction of the EAGLE papers' findings, the shipped head's making, the
committed result files and the documents generated from them. Imports eval, eagle_train and eagle_infer; nothing
imports lab."""
