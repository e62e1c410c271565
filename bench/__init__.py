"""Benchmarks of Precis. Each one measures Precis and a baseline in the same run and prints a plain-text table.

`python -m bench` runs them all, `python -m bench context` one of them; JSON and plots go to bench/out/.
There are no timed assertions here: the numbers are for reading, the contract is in tests/.
"""
