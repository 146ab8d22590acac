"""Independent float64 numpy references that msvm's results are compared against."""
