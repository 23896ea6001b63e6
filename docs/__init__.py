"""qcdoctor's documentation pages, shipped so `qcdoctor rules explain` can point into them."""
