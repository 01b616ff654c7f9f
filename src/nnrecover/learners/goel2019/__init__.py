"""Goel & Panigrahy (2019), "Recovering the Lowest Layer of Deep Networks with High Threshold Activations"."""

from .model import (ACTIVATIONS, CallableUpper, HighThresholdNetwork, UpperPolynomial, population_hermite_moment,
                    random_unit_weights, random_upper_polynomial, tail_bound, threshold_activation,
                    threshold_hermite_coefficients, violating_upper_polynomial)
