"""Test helpers shared by the project's tests and the classroom labs' graders.

Importing this package imports nothing heavy; its modules may need the ``dev`` extra
(:mod:`pagedsim.testing.allocator_machine` needs hypothesis), so nothing else in
``pagedsim`` imports them.
"""
