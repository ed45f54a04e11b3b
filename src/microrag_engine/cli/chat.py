"""``microrag chat`` - a conversation in the terminal, over a local index or a server.

Every question is answered with the conversation so far: a follow-up ("and can I carry
them over?") is searched for together with the turns it continues, and the model reads
the earlier turns - ``Engine.converse`` locally, ``/v1/chat/completions`` with
``--target``. Answers stream as they are written; when a follow-up was rewritten for
retrieval, the query that was searched is shown (dimmed) under the answer. Commands:
``/sources``, ``/verify``, ``/reset``, ``/help``, ``/quit`` (or Ctrl-D).
Line editing comes from the standard library's ``readline`` where the platform has it.
It does not save the conversation or the input history anywhere.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..client import Client, to_hit
from ..config import LLMConfig
from ..engine import Answer, Engine
from ..errors import MicroRAGError
from ..generate import is_refusal
from ..present import Numberer, Ref, Shown, printable
from ..store.base import DocFilter
from ..types import Hit, Turn
from .options import (
    add_conversation,
    add_corpus,
    add_index,
    add_output,
    add_preset,
    add_retrieval,
    add_target,
    add_verification,
    client_for,
    diag,
    engine_for,
    filter_of,
    labels_of,
    remote_filters,
)
from .query import format_hit, verification_lines

PROMPT = "you> "
HELP = """commands:
  /sources  the last answer's sources: citation and scores
  /verify   check the last answer's sentences against its sources (NLI)
  /reset    forget the conversation and start over
  /help     this list
  /quit     leave (or Ctrl-D)"""
COMMANDS = ("/sources", "/verify", "/reset", "/help", "/quit", "/exit")


def register(sub: argparse._SubParsersAction) -> None:
    c = sub.add_parser("chat", help="a conversation with your documents: follow-ups keep the context (/help inside)")
    add_corpus(c)
    add_index(c)
    add_preset(c)
    add_retrieval(c)
    add_conversation(c)
    add_verification(c)  # how /verify checks, on a local index
    add_target(c)
    add_output(c, json=False)
    c.set_defaults(run=cmd_chat)


# ---------------------------------------------------------------- where answers come from


@dataclass
class Reply:
    """One answer as the terminal shows it, whichever backend wrote it."""

    text: str
    sources: list[Hit]
    refused: bool
    searched: str | None = None  # the retrieval query's note when a follow-up was rewritten
    verification: dict[str, Any] | None = None  # Verification.to_dict(), when it came with the answer
    passages: list[Ref] | None = None  # what it may cite, with titles (None: the sources, untitled)


class Backend:
    """Answers a conversation. Both operations are declared here and implemented by each backend."""

    def answer(self, turns: list[Turn], on_piece: Callable[[str], None]) -> Reply:
        """The answer to the last user turn of ``turns``, streamed to ``on_piece``."""
        raise NotImplementedError

    def verify(self, turns: list[Turn], last: Reply) -> dict[str, Any]:
        """The verification of ``last``, the answer to ``turns``' last user turn."""
        raise NotImplementedError

    def close(self) -> None:
        pass


class LocalChat(Backend):
    """``Engine.converse`` over the index, the demo or ``--corpus``."""

    def __init__(self, engine: Engine, llm: LLMConfig | None, labels: list[str] | None, where: DocFilter | None,
                 top_k: int | None) -> None:
        self.engine, self.llm, self.labels, self.where, self.top_k = engine, llm, labels, where, top_k
        self.last: Answer | None = None  # what /verify checks: the text and the retrieval behind it

    def answer(self, turns: list[Turn], on_piece: Callable[[str], None]) -> Reply:
        ans = self.engine.converse(turns, self.llm, on_piece=on_piece, labels=self.labels, top_k=self.top_k, where=self.where)
        self.last = ans
        said = ans.condensed
        return Reply(ans.text, ans.retrieval.hits, ans.refused,
                     searched=said.note() if said is not None and said.how != "alone" else None,
                     passages=[Ref.of(h, self.engine.title(h.chunk.doc)) for h in ans.retrieval.passages])

    def verify(self, turns: list[Turn], last: Reply) -> dict[str, Any]:
        if self.last is None:
            raise MicroRAGError("nothing to verify yet: ask a question first")
        return self.engine.verify(self.last.text, self.last.retrieval).to_dict()


# The server takes at most 100 messages of 16,000 characters; the model reads the last 8 and the
# retrieval query folds in the last few user turns, so a long chat sends its recent end.
SENT_MESSAGES, SENT_CHARS = 40, 16_000


def _recent(turns: list[Turn]) -> list[Turn]:
    return [Turn(t.role, t.content[:SENT_CHARS]) for t in turns[-SENT_MESSAGES:]]


class RemoteChat(Backend):
    """The server's ``/v1/chat/completions`` with the conversation (its recent end), streamed."""

    def __init__(self, client: Client, knobs: dict[str, Any]) -> None:
        # citations=False: the terminal lists sources on /sources, so the answer ends without a block.
        self.client, self.knobs = client, {**knobs, "citations": False}

    def answer(self, turns: list[Turn], on_piece: Callable[[str], None]) -> Reply:
        text, ext = "", {}
        for chunk in self.client.chat(_recent(turns), stream=True, **self.knobs):
            if chunk.delta:
                text += chunk.delta
                on_piece(chunk.delta)
            if chunk.microrag is not None:
                ext = chunk.microrag
        # The server flags the retrieval query it made of a follow-up (Condensed.note()).
        searched = next((f for f in ext.get("flags", []) if f.startswith("conversation: retrieval query")), None)
        rows = [*ext.get("sources", []), *ext.get("context", [])]
        return Reply(text, [to_hit(s) for s in ext.get("sources", [])], bool(ext.get("refused")), searched,
                     ext.get("verification"), [Ref.of_row(s) for s in rows])

    def verify(self, turns: list[Turn], last: Reply) -> dict[str, Any]:
        if last.verification is not None:  # the server verified as it answered (its default)
            return last.verification
        # Asked again with verification on (an LLM may word it differently: the session shows the text checked).
        done = self.client.chat(_recent(turns), **{**self.knobs, "verify": True})
        checked = (done.get("microrag") or {}).get("verification")
        if checked is None:
            raise MicroRAGError("the server did not verify the answer (a refusal has nothing to check)")
        return checked

    def close(self) -> None:
        self.client.close()


# ---------------------------------------------------------------- the terminal


def _dim(text: str) -> str:
    """Dimmed on a terminal; plain (indented) when piped."""
    return f"\x1b[2m{text}\x1b[0m" if sys.stdout.isatty() else text


class Session:
    """The conversation so far and the last reply; reads commands and questions."""

    def __init__(self, backend: Backend) -> None:
        self.backend = backend
        self.turns: list[Turn] = []
        self.last: Reply | None = None
        self.cited: list[Ref] = []  # what the last answer's [1], [2] ... stand for

    def ask(self, question: str) -> None:
        asked = [*self.turns, Turn("user", question)]
        # Citations numbered as the answer arrives ([1], [2], ...), the cited sources listed after it.
        numberer = Numberer(None)
        try:
            reply = self.backend.answer(asked, lambda piece: print(printable(numberer.feed(piece)), end="", flush=True))
        except KeyboardInterrupt:  # Ctrl-C stops this answer, not the chat; the question is forgotten
            print("\n" + _dim("(interrupted)"))
            return
        except MicroRAGError as exc:  # a refused request or a failing server: say so, keep chatting
            print(flush=True)
            print(f"microrag: error: {exc}", file=sys.stderr, flush=True)
            return
        print(printable(numberer.flush()), end="")
        if not reply.text.endswith("\n"):
            print()
        # The model reads its earlier turns as written (tags, not numbers): what it was prompted with.
        self.turns = [*asked, Turn("assistant", reply.text)]
        self.last, self.cited = reply, [] if reply.refused else numberer.cited
        if reply.searched:
            print(_dim(f"  {printable(reply.searched)}"))
        if self.cited:
            known = reply.passages if reply.passages is not None else [Ref.of(h) for h in reply.sources]
            listed = Shown("", self.cited).among(known).sources(markdown=False)
            print(_dim(printable(listed.partition("\n")[2])))
        if reply.sources and not reply.refused:
            n = len(reply.sources)
            print(_dim(f"  ({n} source{'s' if n != 1 else ''} retrieved: /sources; check the answer: /verify)"))

    def command(self, line: str) -> bool:
        """Run a /command; False when the chat should end."""
        name = line.split()[0].lower()
        if name in ("/quit", "/exit"):
            return False
        if name == "/help":
            print(HELP)
        elif name == "/reset":
            self.turns, self.last, self.cited = [], None, []
            print(_dim("(the conversation is forgotten; ask anything)"))
        elif name == "/sources":
            self._sources()
        elif name == "/verify":
            self._verify()
        else:
            print(f"unknown command {name}; /help lists the commands")
        return True

    def _sources(self) -> None:
        if self.last is None:
            print("no answer yet: ask a question first")
        elif not self.last.sources:
            print("the last answer has no sources" + (" (the documents do not cover it)" if self.last.refused else ""))
        else:
            numbers = {(r.doc, r.chunk): n for n, r in enumerate(self.cited, 1)}
            for hit in self.last.sources:
                n = numbers.get((hit.chunk.doc, hit.chunk.index))
                print(f"{f'[{n}]' if n else '   '} {printable(format_hit(hit))}")

    def _verify(self) -> None:
        last = self.last
        if last is None:
            print("no answer yet: ask a question first")
            return
        if last.refused or is_refusal(last.text):
            print("nothing to verify: the last answer says the documents do not cover the question")
            return
        asked = self.turns[:-1]  # the conversation up to the question the last answer answers
        try:
            checked = self.backend.verify(asked, last)
        except MicroRAGError as exc:
            print(f"microrag: error: {exc}", file=sys.stderr, flush=True)
            return
        print("\n".join(verification_lines(checked)))
        if str(checked.get("text", last.text)).strip() != last.text.strip():  # a drop/refuse policy, or a new answer
            print("\nAnswer as verified:\n" + printable(str(checked.get("text"))))

    def run(self, read: Callable[[str], str]) -> None:
        while True:
            try:
                line = read(PROMPT).strip()
            except EOFError:  # Ctrl-D
                print()
                return
            except KeyboardInterrupt:  # Ctrl-C at the prompt clears the line, as a shell does
                print()
                continue
            if not line:
                continue
            if line.split()[0].lower() in COMMANDS or (line.startswith("/") and line[1:].isalpha()):
                if not self.command(line):
                    return
            else:
                self.ask(line)


def _backend(args: argparse.Namespace) -> Backend:
    client = client_for(args)
    if client is not None:
        where, exclude = remote_filters(args)
        try:
            who = client.whoami()  # a wrong key or URL fails here, before the first question
        except BaseException:
            client.close()
            raise
        if not args.quiet:
            diag(f"chatting with {client.display_url} as {who.get('name')} ({who.get('role')}); /help lists the commands, Ctrl-D quits")
        return RemoteChat(client, {"top_k": args.top_k, "where": where or None, "exclude": exclude or None})
    where_filter = filter_of(args)
    engine = engine_for(args)
    llm = LLMConfig.from_env()
    if not args.quiet:
        diag((f"answering with the LLM at {llm.base_url} (model {llm.model})" if llm
              else "answering with the extractive answerer (no LLM_BASE_URL set)")
             + "; /help lists the commands, Ctrl-D quits")
    return LocalChat(engine, llm, labels_of(args), where_filter, args.top_k)


def cmd_chat(args: argparse.Namespace) -> int:
    backend = _backend(args)
    try:
        # Imported here, not at the top: loading readline changes how input() behaves for
        # the whole process, and only this command reads lines interactively.
        import readline  # noqa: F401
    except ImportError:  # Windows' Python has none: input() still works, without line editing
        pass
    try:
        Session(backend).run(input)
    finally:
        backend.close()
    return 0
