"""Bad input to SessionScope, the message history and the tool dispatcher: a memlane
error naming the problem (a tool result for the dispatcher), never a raw TypeError,
AttributeError or ValueError, and nothing stored."""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pytest

from memlane import InvalidArgumentError, Memory
from memlane.agent import MemoryTools, SessionScope
from memlane.agent.history import MESSAGES, add_message, message_item, thread_context


@pytest.fixture
def mem(word_embedder):
    m = Memory(None, word_embedder)
    yield m
    m.close()


# -- identity links ------------------------------------------------------------------------


def test_two_spellings_of_one_contact_naming_different_people_are_refused():
    with pytest.raises(InvalidArgumentError, match=r"two people for 'telegram:1'.*alice.*bob"):
        SessionScope(identity_links={"Telegram:1": "alice", "telegram:1": "bob"})


def test_two_spellings_of_one_contact_naming_the_same_person_are_one_link():
    s = SessionScope(identity_links={"Telegram:1": "alice", "telegram:1": " alice "})
    assert s.identity_links == {"telegram:1": "alice"}
    assert s.identity("TELEGRAM", 1) == "alice"


@pytest.mark.parametrize(
    ("key", "problem"),
    [
        ("telegram:", "neither part empty"),
        (":123", "neither part empty"),
        (":", "neither part empty"),
        ("telegram123", "neither part empty"),
        ("telegram: 123", "blanks around"),
        ("telegram :123", "blanks around"),
        ("telegram\t:\t123", "blanks around"),
    ],
)
def test_link_keys_that_could_never_apply_are_refused(key, problem):
    with pytest.raises(InvalidArgumentError, match=problem):
        SessionScope(identity_links={key: "alice"})


def test_a_key_padded_as_a_whole_still_links():
    # Blanks around the whole key cannot change which contact it names: stripped, as
    # resolve strips every id.
    assert SessionScope(identity_links={" telegram:123 ": "alice"}).identity("telegram", 123) == (
        "alice"
    )


@pytest.mark.parametrize("links", [[("telegram:1", "alice")], "telegram:1=alice", 5])
def test_identity_links_must_be_a_mapping(links):
    with pytest.raises(InvalidArgumentError, match="identity_links must be a dict"):
        SessionScope(identity_links=links)


def test_a_contact_id_may_hold_a_colon_and_be_linked():
    s = SessionScope(identity_links={"matrix:@al:example.org": "alice"})
    ev = s.resolve("matrix", "@al:example.org", "!room:example.org")
    assert ev.identity == "alice" and ev.contact == "matrix:@al:example.org"
    assert ev.room_id == "matrix:!room:example.org"


def test_a_source_with_a_colon_is_refused():
    # ("a:b", "c") and ("a", "b:c") would be one contact, one memory nobody linked.
    s = SessionScope()
    assert s.resolve("a", "b:c").fields["user_id"] == "a:b:c"
    with pytest.raises(InvalidArgumentError, match="source must not contain ':'"):
        s.resolve("a:b", "c")
    with pytest.raises(InvalidArgumentError, match="source must not contain ':'"):
        s.identity("a:b", "c")
    with pytest.raises(InvalidArgumentError, match="source must not contain ':'"):
        s("a:b", "c")


@pytest.mark.parametrize("where", ["contact_id", "chat_id", "message_id"])
def test_an_int_id_past_128_bits_is_refused(where):
    s = SessionScope()
    ids: dict[str, Any] = {"contact_id": 1, "chat_id": 2, "message_id": 3}
    ids[where] = 10**5000
    with pytest.raises(InvalidArgumentError, match=f"{where} is an int of 16610 bits"):
        s.resolve("telegram", ids["contact_id"], ids["chat_id"], message_id=ids["message_id"])
    ids[where] = -(2**128)
    with pytest.raises(InvalidArgumentError, match=f"{where} is an int of 129 bits"):
        s.resolve("telegram", ids["contact_id"], ids["chat_id"], message_id=ids["message_id"])


def test_int_ids_up_to_128_bits_are_kept_whole():
    s = SessionScope(identity_links={f"telegram:{2**128 - 1}": "alice"})
    assert s.identity("telegram", 2**128 - 1) == "alice"
    ev = s.resolve("telegram", -(2**63), 2**64, message_id=-(2**128 - 1))
    assert ev.contact == f"telegram:{-(2**63)}"
    assert ev.room_id == f"telegram:{2**64}" and ev.message_id == str(-(2**128 - 1))


def test_huge_int_in_a_link_is_refused():
    with pytest.raises(InvalidArgumentError, match="is an int of"):
        SessionScope(identity_links={"telegram:1": 10**5000})


# -- the message history -------------------------------------------------------------------


EVENT = SessionScope(agent_id="bot").resolve("telegram", 1, 2)


@pytest.mark.parametrize(
    ("kwargs", "problem"),
    [
        ({"recent": "8"}, "recent must be an int >= 0, got '8'"),
        ({"recent": -1}, "recent must be an int >= 0"),
        # Past 4,300 digits Python cannot write an int out: the message names its size.
        ({"recent": 10**5000}, "recent must be at most 9223372036854775807, got an int of"),
        ({"recent": -(10**5000)}, "recent must be an int >= 0, got a negative int of 16610 bits"),
        ({"relevant": 2.5}, "relevant must be an int >= 0"),
        ({"max_line": None}, "max_line must be an int >= 2, got None"),
        ({"max_line": 1}, "max_line must be an int >= 2"),
        ({"message": None}, "message must be a str, got NoneType"),
        ({"message": b"hi"}, "message must be a str, got bytes"),
        ({"scope": {"user_id": "x"}}, "scope must be an EventScope"),
        ({"scope": None}, "scope must be an EventScope"),
    ],
)
def test_thread_context_refuses_bad_arguments(mem, kwargs, problem):
    args: dict[str, Any] = {"message": "hi", "scope": EVENT, **kwargs}
    with pytest.raises(InvalidArgumentError, match=re.escape(problem)):
        thread_context(mem, args.pop("message"), args.pop("scope"), **args)


def test_thread_context_still_reads(mem):
    add_message(mem, "hello there", EVENT)
    assert [line.split("] ", 1)[1] for line in thread_context(mem, "", EVENT)] == [
        "user: hello there"
    ]
    assert thread_context(mem, "hello", EVENT, recent=0, relevant=0) == []


@pytest.mark.parametrize(
    ("kwargs", "problem"),
    [
        ({"scope": {"user_id": "x"}}, "scope must be an EventScope"),
        ({"metadata": [1]}, "metadata must be a dict, got list"),
        ({"metadata": "role=user"}, "metadata must be a dict, got str"),
        pytest.param({"message_id": 10**5000}, "message_id is an int of", id="huge-id"),
        ({"message_id": ""}, "message_id must be a non-empty str"),
        ({"message_id": 1.5}, "message_id must be a non-empty str"),
        ({"role": None}, "role must be a str"),
        ({"role": ""}, "role must not be empty"),
        ({"in_order": "yes"}, "in_order must be a bool"),
    ],
)
def test_add_message_refuses_bad_arguments_and_stores_nothing(mem, kwargs, problem):
    args: dict[str, Any] = {"scope": EVENT, **kwargs}
    scope = args.pop("scope")
    with pytest.raises(InvalidArgumentError, match=problem):
        add_message(mem, "x", scope, **args)
    with pytest.raises(InvalidArgumentError, match=problem):
        message_item("x", scope, **args)
    assert mem.count(MESSAGES) == 0


def test_a_message_id_is_kept_as_the_event_spells_it(mem):
    # Given to add_message or carried by the event, one id is one message.
    ev = SessionScope(agent_id="bot").resolve("telegram", 1, 2, message_id=77)
    first = add_message(mem, "hi", ev)
    again = add_message(mem, "hi", EVENT, message_id=" 77 ")
    assert first.metadata["messageId"] == again.metadata["messageId"] == "77"
    as_int = add_message(mem, "ok", EVENT, role="assistant", message_id=78)
    assert as_int.metadata["messageId"] == "78"


# -- the tool dispatcher -------------------------------------------------------------------


@pytest.mark.parametrize(
    "arguments",
    [
        {"content": "hi", 1: "x", "extra": "y"},
        {1: "x", (2, 3): "y"},
        {"content": "hi", None: "x"},
        pytest.param({10**5000: "x"}, id="huge-int-name"),
    ],
)
def test_argument_names_that_are_no_str_come_back_as_an_error(mem, arguments):
    result = MemoryTools(mem, {"user_id": "u"}).handle_tool_call("remember", arguments)
    assert result["ok"] is False
    assert result["error"]["type"] == "invalid_arguments"
    assert result["error"]["message"].startswith("argument names must be str, got ")
    assert mem.count() == 0


def test_unknown_names_of_str_still_listed_sorted(mem):
    result = MemoryTools(mem).handle_tool_call("remember", {"content": "hi", "b": 1, "a": 2})
    assert result["error"]["message"].startswith("unknown argument(s) ['a', 'b']")


@pytest.mark.parametrize(
    "name", [["recall"], {"recall": 1}, None, pytest.param(10**5000, id="huge-int")]
)
def test_a_tool_name_that_is_no_str_comes_back_as_an_error(mem, name):
    result = MemoryTools(mem).handle_tool_call(name, {"query": "x"})
    assert result["error"] == {
        "type": "unknown_tool",
        "message": f"the tool name must be a str, got {type(name).__name__}",
    }


def test_arguments_of_any_type_come_back_as_an_error(mem):
    tools = MemoryTools(mem)
    for arguments in (np.array([1, 2]), [("query", "x")], 5, b""):
        result = tools.handle_tool_call("recall", arguments)
        assert result["ok"] is False and result["error"]["type"] == "invalid_arguments"
