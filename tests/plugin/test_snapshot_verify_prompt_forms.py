"""genguard_snapshot.verify() takes every prompt form record() takes: conversations (with chat_template_kwargs) and
token ids, recorded under --snapshot-update and verified on the next run. It refused them before ("prompt 0 is list
[...], not a string"), after recording them; and ``do_sample=False`` made it stale ("do_sample None -> False")."""

from __future__ import annotations

import pytest
from snapshot_support import run

import pytest_genguard

VERIFIED = """
import pytest

import pytest_genguard
from chat_support import chat_tokenizer

CONVERSATION = [
    {"role": "system", "content": "You answer in one word."},
    {"role": "user", "content": "USER_TEXT"},
]


@pytest.fixture(scope="module")
def tok():
    return chat_tokenizer()


@pytest.fixture(scope="module")
def model():
    return pytest_genguard.tiny_model("gpt2")


def test_conversation(genguard_snapshot, model, tok):
    genguard_snapshot.verify(model, tok, [CONVERSATION, "the quick"], max_new_tokens=4, CHAT_KWARGS)


def test_token_ids(genguard_snapshot, model, tok):
    # do_sample=False is stored as unset, as record() stores it: passing it again is no changed argument
    genguard_snapshot.verify(model, tok, [[5, 6, 7], "a"], max_new_tokens=4, do_sample=False)
"""


@pytest.fixture(scope="module", autouse=True)
def _warm_imports() -> None:
    """Load what recording and verifying import in this process first (pytester's in-process runs drop modules)."""
    tokenizer = pytest_genguard.tiny_tokenizer()
    model = pytest_genguard.tiny_model("gpt2")
    assert pytest_genguard.verify(model, tokenizer, pytest_genguard.record(model, tokenizer, ["a"], max_new_tokens=2))


def _module(pytester: pytest.Pytester, *, user: str = "the quick brown fox", thinking: bool = False) -> None:
    chat = "chat_template_kwargs={'enable_thinking': False}" if thinking else "seed=None"
    pytester.makepyfile(test_gen=VERIFIED.replace("USER_TEXT", user).replace("CHAT_KWARGS", chat))


@pytest.fixture
def recorded(pytester: pytest.Pytester) -> pytest.Pytester:
    _module(pytester)
    result = run(pytester, "--snapshot-update")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(["snapshots: 0 matched, *2 created"])
    return pytester


def test_conversations_and_token_ids_verify_after_recording(recorded: pytest.Pytester) -> None:
    result = run(recorded)
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(["snapshots: 2 matched*"])


def test_a_changed_message_is_a_stale_snapshot(recorded: pytest.Pytester) -> None:
    """Negative control: the conversation is part of the test's arguments, so another message is not verified
    against the old trace."""
    _module(recorded, user="jumps over the lazy dog")
    result = run(recorded, "-k", "test_conversation")
    result.assert_outcomes(failed=1, deselected=1)
    result.stdout.fnmatch_lines(["E  *AssertionError: stale: *"])


def test_chat_template_kwargs_added_after_recording_make_it_stale(recorded: pytest.Pytester) -> None:
    _module(recorded, thinking=True)
    result = run(recorded, "-k", "test_conversation")
    result.assert_outcomes(failed=1, deselected=1)
    result.stdout.fnmatch_lines(["E  *AssertionError: stale: *chat_template_kwargs*"])
