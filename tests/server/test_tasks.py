"""tasks.py: a chat UI's housekeeping prompts recognised by their documented shapes, and
answered in the shape the client parses (by the fallback here; the model path in test_openai)."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from microrag_engine.server.tasks import KINDS, Task, fallback, fallback_title, parse_model, recognise

# The first lines of Open WebUI 0.12.4's templates (open_webui/config.py), then the history block it fills in.
HISTORY = "<chat_history>\nUSER: how many vacation days do I get?\nASSISTANT: 20 days a year. [1]\n</chat_history>"
OPEN_WEBUI = {
    "title": "### Task:\nGenerate a concise title summarizing the chat history.\n### Guidelines:\n- Keep it short",
    "tags": "### Task:\nGenerate 1-3 broad tags categorizing the main themes of the chat history, along with 1-3 more",
    "follow_ups": "### Task:\nPredict 3-5 useful messages this user might naturally send next to advance their objective.",
    "autocomplete": "### Task:\nYou are an autocompletion system. Continue the text in `<text>` based on the type",
    "queries": "### Task:\nAnalyze the chat history to determine the necessity of generating search queries, in the given",
}
LIBRECHAT = ("Provide a concise, 5-word-or-less title for the conversation, using title case conventions. "
             "Only return the title itself.\n\nConversation:\nUser: how do I reset my VPN password?\nAI: Use the portal.")


@pytest.mark.parametrize("kind", KINDS)
def test_each_open_webui_task_is_recognised_with_its_history(kind):
    task = recognise(f"{OPEN_WEBUI[kind]}\n### Chat History:\n{HISTORY}\n<type>General</type>\n<text>how many</text>")
    assert task is not None and task.kind == kind and task.as_json
    assert task.history.startswith("USER: how many vacation days do I get?")
    assert json.loads(fallback(task))  # what Open WebUI parses: JSON, never prose


def test_older_open_webui_wordings_are_recognised_too():
    assert recognise("### Task:\nGenerate a concise, 3-5 word title with an emoji summarizing the chat history.").kind == "title"
    assert recognise("### Task:\nSuggest 3-5 relevant follow-up questions or prompts that the user might").kind == "follow_ups"


def test_a_librechat_title_prompt_gets_a_bare_title():
    task = recognise(LIBRECHAT)
    assert task == Task("title", task.history, as_json=False) and fallback(task) == "Reset VPN Password"


def test_real_questions_are_not_tasks():
    for question in ("how many vacation days do I get?", "What is the task: generate a title for the release?",
                     "Generate a concise title for my report on the 2024 budget",  # asked of the documents, not a UI's task
                     "### Task list for on-call engineers"):
        assert recognise(question) is None, question


def test_a_named_task_wins():
    task = recognise("how many vacation days do I get?", named="title")
    assert task is not None and task.kind == "title" and fallback(task) == '{"title": "Vacation Days"}'


@pytest.mark.parametrize(("question", "title"), [
    ("how many vacation days do I get?", "Vacation Days"),
    ("Which port does the VPN use?", "Port VPN"),
    ("what is it?", "New chat"),
    ("", "New chat"),
])
def test_the_fallback_title_is_the_questions_own_naming_words(question, title):
    assert fallback_title(f"USER: {question}\nASSISTANT: something else entirely") == title


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=3000))
def test_any_text_is_recognised_or_not_without_error_and_a_fallback_is_always_valid(text):
    task = recognise(text)
    if task is not None:
        out = fallback(task)
        assert json.loads(out) if task.as_json else isinstance(out, str)
    assert len(fallback_title(text)) <= 80


def test_a_models_reply_is_used_only_in_the_shape_asked_for():
    title = Task("title", "USER: x", as_json=True)
    assert parse_model(title, 'Sure! {"title": "Vacation  Days"}') == '{"title": "Vacation Days"}'
    assert parse_model(title, "Vacation days") is None and parse_model(title, '{"tags": ["x"]}') is None
    assert parse_model(Task("tags", ""), '{"tags": ["HR", 3]}') is None
    assert parse_model(Task("follow_ups", ""), '{"follow_ups": ["Can I carry days over?"]}') == \
        '{"follow_ups": ["Can I carry days over?"]}'
    assert parse_model(Task("title", "", as_json=False), '{"title": "Leave Policy"}') == "Leave Policy"


def test_a_question_quoting_the_librechat_phrase_mid_text_is_a_question():
    asked = ("What does our style guide say about chat names? It quotes a prompt that begins with words and much more "
             "context here, and then much later says: Generate a 5-word-or-less title for the conversation.")
    assert recognise("Background on our handbook. " * 10 + asked) is None
