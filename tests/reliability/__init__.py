"""The reliability and security campaign (issue 7): stateful fuzzing over real processes,
secret fuzzing, the diagnostic bound, fault injection at every stage, and load."""

import pytest

pytest.register_assert_rewrite("tests.support.reliability")
