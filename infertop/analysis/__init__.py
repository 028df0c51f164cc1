"""Pure functions over samples: rates, quantiles, SLOs. No I/O, clock passed in."""
