"""Implementation of Bakshi, Jayaram, Woodruff (COLT 2019); the public entry is :mod:`nnrecover.learners.bakshi2019`."""
