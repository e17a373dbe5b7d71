"""pagedsim.labs.steps: a property test's failing example as the steps that break it."""

from __future__ import annotations

from pagedsim.labs.steps import plain_steps

REPRODUCE = ("You can reproduce this test case by temporarily adding "
             "@reproduce_failure('6.170.27', b'AABBAkE') as a decorator on your test function")

# Lab 4's accounting machine, as hypothesis printed it for the token-counts-shared-twice mutant.
MACHINE = f"""AssertionError: slot categories (26, 3, -13, 0, 0, 96) do not partition 112
Failing test case: <state machine>
state = CowAccountingMachine()
Draw 1 (block_size): 4
Draw 2 (num_blocks): 28
state.setup(data=data(...))
state.categories_partition_capacity()
state.consistent()
state.contents_match()
state.admit_with_forks(extra=14, k=1, num_tokens=13)
state.categories_partition_capacity()
state.consistent()
state.contents_match()
Draw 3: 1
state.fork_held(data=data(...))
state.categories_partition_capacity()
state.teardown()

{REPRODUCE}"""


def test_a_state_machine_reads_as_numbered_steps_and_the_failed_check():
    assert plain_steps(MACHINE) == """\
AssertionError: slot categories (26, 3, -13, 0, 0, 96) do not partition 112
The steps that break it (the shortest found):
  1. setup: drew block_size = 4, num_blocks = 28
  2. admit with forks: extra=14, k=1, num_tokens=13
  3. fork held: drew 1
then the check 'categories partition capacity' fails."""


def test_a_failing_rule_is_the_last_step():
    # Lab 5's machine when a rule itself raises (no check runs after it).
    text = """DID NOT RAISE <class 'OutOfMemoryError'>
Failing test case: <state machine>
state = CacheMachine()
state.setup(block_size=1, num_blocks=8)
state.consistent_on_its_own()
state.same_blocks_as_the_oracle()
Draw 1 (earlier): []
Draw 2 (cut): 0
Draw 3 (new): [2]
state.allocate(data=data(...))
state.consistent_on_its_own()
state.same_blocks_as_the_oracle()
Draw 4: 0
state.append(data=data(...))
state.teardown()"""
    assert plain_steps(text).splitlines()[1:] == [
        "The steps that break it (the shortest found):",
        "  1. setup: block_size=1, num_blocks=8",
        "  2. allocate: drew earlier = [], cut = 0, new = [2]",
        "  3. append: drew 0",
        "the last step fails."]


def test_a_plain_property_reads_as_its_input():
    text = f"""assert [7, 7] == [4, 1]
Failing test case: test_scan_finds_every_written_slot(
    num_blocks=2,
    block_size=7,
    data=data(...),
)
Draw 1: [False,
 True]

{REPRODUCE}"""
    assert plain_steps(text) == """assert [7, 7] == [4, 1]
The smallest input found that breaks it: num_blocks=2, block_size=7.
Values drawn inside the test: [False, True]."""


def test_text_without_an_example_is_unchanged():
    text = "AssertionError: a shared slot counts once\nassert 12 == 6"
    assert plain_steps(text) == text
