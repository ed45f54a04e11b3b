"""HTML -> the text a browser shows, as Markdown-like lines.

In: an HTML page (str). Out: its visible text, "#" headings, "- " items, " | " cells,
fenced <pre> code, backticked inline <code>. Red team #12: what a reader would not
see (hidden attributes, CSS that hides, fallback content) is dropped with a warning;
page chrome (navigation, sidebars, search, footers, help pop-ups) is left out.
Not here: fetching, or running scripts (a page built by JavaScript shows nothing).
"""

from __future__ import annotations

import logging
import re
import threading
from functools import lru_cache

from .. import rx
from .base import fence, layout

log = logging.getLogger("microrag")


# ---------------------------------------------------------------- what a browser would not show

# Red team #12: instructions hidden from the reader but indexed for the model. Styles are
# parsed as CSS (tinycss2: comments, escapes and !important as a browser reads them),
# inline and in <style> rules (also inside @media screen/all, @supports and @layer),
# selectors matched by soupsieve one by one, and judged by effect. What is not computed
# (the full cascade, var(), layout) is listed in SECURITY.md.
_OFFSCREEN_PX = 999  # position/indent/translation this far off the page ("left:-9999px")
_TINY_PX = 2.0  # text smaller than this is unreadable
# Elements whose content a browser does not render as text (fallback content, closed
# widgets, descriptions), beside script/style/template/noscript which are removed first.
# (Matched by name in one pass over the tree: soupsieve walks the whole tree once per selector,
# which was most of an HTML ingest's time.)
_UNSHOWN = frozenset(("noembed", "noframes", "iframe", "datalist", "audio", "video", "canvas", "object", "annotation",
                      "annotation-xml"))


def _unshown(tag) -> bool:
    """``tag`` is one of ``_UNSHOWN``, a closed ``<dialog>``, or an SVG ``<desc>``/``<title>``."""
    if tag.name in _UNSHOWN:
        return True
    if tag.name == "dialog":
        return not tag.has_attr("open")
    return tag.name in ("desc", "title") and tag.find_parent("svg") is not None
# Work bound for <style> rules: matching costs (compound selectors x elements), about 2 us
# each here. A page past it is refused with a clear error (a hostile one held a worker for
# minutes); real documentation pages stay far below it.
MAX_STYLE_WORK = 1_000_000
_UNITS_PX = {"px": 1, "pt": 4 / 3, "pc": 16, "em": 16, "rem": 16, "ex": 8, "ch": 8, "cm": 37.8, "mm": 3.78, "q": 0.945,
             "in": 96, "vw": 12.8, "vh": 8, "vmin": 8, "vmax": 12.8}


def _values(decl) -> list:
    return [t for t in decl.value if t.type not in ("whitespace", "comment")]


def _length_px(token) -> float | None:
    """A length in CSS px where the unit says so (0 in any unit is 0); None otherwise."""
    if token is None:
        return None
    if token.type == "number" and token.value == 0:
        return 0.0
    if token.type == "percentage":
        return token.value / 100 * 16
    if token.type == "dimension":
        scale = _UNITS_PX.get(token.lower_unit)
        return None if scale is None else token.value * scale
    if token.type == "function" and token.lower_name == "calc":  # calc(<one length>)
        inner = [t for t in token.arguments if t.type not in ("whitespace", "comment")]
        return _length_px(inner[0]) if len(inner) == 1 else None
    return None


def _colour(tokens) -> tuple[tuple[float, float, float] | None, float] | None:
    """(sRGB or None when the space is not convertible, alpha) of a colour value."""
    from tinycss2.color4 import parse_color

    color = parse_color(tokens[0]) if len(tokens) == 1 else None
    if color is None or isinstance(color, str):  # unparsed, or currentcolor
        return None
    try:
        return tuple(color.to("srgb").coordinates), color.alpha
    except NotImplementedError:  # lab/lch/oklab/oklch: read lightness instead
        lightness = color.coordinates[0] / (100 if color.space in ("lab", "lch") else 1)
        return ((1.0, 1.0, 1.0) if lightness >= 0.95 else None), color.alpha


def _white_or_clear(tokens) -> bool:
    got = _colour(tokens)
    if got is None:
        return False
    rgb, alpha = got
    return alpha <= 0.05 or (rgb is not None and min(rgb) >= 0.94)


def _cascade(declarations: list) -> dict[str, list]:
    """Property -> value, later declarations winning unless an earlier one is !important."""
    found: dict[str, list] = {}
    important: set[str] = set()
    for d in declarations:
        if d.type != "declaration" or (d.lower_name in important and not d.important):
            continue
        found[d.lower_name] = _values(d)
        if d.important:
            important.add(d.lower_name)
    return found


def _scales_to_nothing(values: list) -> bool:
    for t in values:
        if t.type != "function":
            continue
        nums = [a.value for a in t.arguments if a.type in ("number", "percentage")]
        name = t.lower_name
        if name.startswith("scale") and nums and min(abs(n) for n in nums) <= 0.01:
            return True
        if name == "matrix" and len(nums) == 6 and abs(nums[0] * nums[3] - nums[1] * nums[2]) <= 1e-4:
            return True
        if name.startswith("translate"):
            offsets = [_length_px(a) for a in t.arguments if a.type in ("dimension", "number", "percentage", "function")]
            if any(o is not None and abs(o) >= _OFFSCREEN_PX for o in offsets):
                return True
    return False


def _hides(declarations: list) -> str:
    """Why these declarations hide an element's text ("" when they do not)."""
    found = _cascade(declarations)
    first = {k: (v[0] if v else None) for k, v in found.items()}
    ident = {k: (t.lower_value if t is not None and t.type == "ident" else "") for k, t in first.items()}
    if ident.get("display") == "none":
        return "display:none"
    if ident.get("visibility") in ("hidden", "collapse") or ident.get("content-visibility") == "hidden":
        return "visibility"
    for prop in ("opacity", "zoom"):
        value = first.get(prop)
        if value is not None and value.type in ("number", "percentage") and value.value <= (5 if value.type == "percentage" else 0.05):
            return prop
    if any(t.type == "function" and t.lower_name == "opacity" and any(a.type in ("number", "percentage") and a.value <= 0.05
                                                                       for a in t.arguments) for t in found.get("filter", [])):
        return "opacity"
    size = _length_px(first.get("font-size"))
    if size is not None and size < _TINY_PX:
        return "font-size"
    # White or transparent text, when the element sets no background (the caller checks
    # the ancestors and the style sheets): a page without one is white, as with PDFs.
    for prop in ("color", "-webkit-text-fill-color"):
        if found.get(prop) and _white_or_clear(found[prop]) and not ({"background", "background-color"} & set(found)):
            return "colour"
    for prop in ("left", "top", "right", "bottom", "inset", "text-indent", "margin-left", "margin-top", "letter-spacing"):
        off = _length_px(first.get(prop))
        if off is not None and off <= (-_OFFSCREEN_PX if prop != "letter-spacing" else -8):
            return "off-screen"
    overflow = {ident.get(p) for p in ("overflow", "overflow-x", "overflow-y")}
    sizes = [_length_px(first.get(p)) for p in ("width", "height", "max-width", "max-height")]
    if overflow & {"hidden", "clip"} and any(s is not None and s <= 1 for s in sizes):
        return "zero size"
    clip = found.get("clip-path") or found.get("clip")
    if clip and clip[0].type == "function":
        args = [a for a in clip[0].arguments if a.type in ("number", "dimension", "percentage")]
        px = [_length_px(a) for a in args]
        name = clip[0].lower_name
        if name == "inset" and any(a.type == "percentage" and a.value >= 50 for a in args):
            return "clipped"
        box = [p for p in px if p is not None]
        if name == "rect" and len(box) == 4 and abs(box[1] - box[3]) <= 1 and abs(box[2] - box[0]) <= 1:
            return "clipped"
        if name in ("circle", "ellipse", "polygon") and px and all(p == 0 for p in px if p is not None):
            return "clipped"
    if _scales_to_nothing(found.get("transform", []) + found.get("translate", []) + found.get("scale", [])):
        return "transformed away"
    scale = first.get("scale")
    if scale is not None and scale.type in ("number", "percentage") and scale.value <= 0.01:
        return "transformed away"
    return ""


def _rules(nodes: list) -> list:
    """Qualified rules of a sheet, with those inside @media (not print-only), @supports and @layer."""
    import tinycss2

    out = []
    for rule in nodes:
        if rule.type == "qualified-rule":
            out.append(rule)
        elif rule.type == "at-rule" and rule.content is not None and rule.lower_at_keyword in ("media", "supports", "layer", "container"):
            media = tinycss2.serialize(rule.prelude).strip().lower()
            if rule.lower_at_keyword == "media" and media and "screen" not in media and "all" not in media:
                continue  # print, speech: not what a reader of the screen sees
            out += _rules(tinycss2.parse_rule_list(rule.content, skip_comments=True, skip_whitespace=True))
    return out


def _selectors(prelude) -> list[str]:
    """A rule's selector list, one selector each: an unknown one must not void the others."""
    import tinycss2

    return [s.strip() for s in tinycss2.serialize(prelude).split(",") if s.strip()]


def _background(found: dict[str, list]) -> bool:
    """Whether declarations set a background that white text could be read on (not white)."""
    for prop in ("background", "background-color"):
        for t in found.get(prop, []):
            got = _colour([t])
            if got is not None and got[0] is not None and min(got[0]) < 0.94 and got[1] > 0.05:
                return True
            if t.type in ("url", "function") and not (got and got[0]):  # an image or gradient: assume readable
                return True
    return False


def _inline_style(style: str) -> tuple[str, bool]:
    """(why a ``style`` attribute hides its element's text, "" when it does not; whether it sets a
    readable background). Pages repeat the same few inline styles on thousands of elements
    (SQLite's reference: 116,000 on 214 pages), so each distinct short one is parsed once: an
    ingest of those pages spent 18.1 s instead of 21.7 on all but the embedder and the screen.
    A long one is parsed each time: what is remembered stays small whatever a page holds."""
    return _short_style(style) if len(style) <= MAX_REMEMBERED_STYLE else _parse_style(style)


MAX_REMEMBERED_STYLE = 256  # characters of a style attribute remembered (4,096 of them: 1 MB at most)


@lru_cache(maxsize=4096)
def _short_style(style: str) -> tuple[str, bool]:
    return _parse_style(style)


def _parse_style(style: str) -> tuple[str, bool]:
    import tinycss2

    declarations = tinycss2.parse_declaration_list(style, skip_comments=True, skip_whitespace=True)
    return _hides(declarations), _background(_cascade(declarations))


def _hidden_elements(soup, name: str) -> list:
    """Elements whose text a browser would not show: the ``hidden`` attribute, elements
    not rendered as text, hiding inline styles, and what a hiding <style> rule selects."""
    import tinycss2
    from bs4 import Tag
    from soupsieve import SelectorSyntaxError

    tags = soup.find_all(True)
    # A background that makes white text readable, inherited down the tree: one pass in
    # document order (a parent is always met before its children).
    on_background: dict[int, bool] = {}
    rules = [r for sheet in soup.find_all("style")
             for r in _rules(tinycss2.parse_stylesheet(sheet.get_text(), skip_comments=True, skip_whitespace=True))]
    sheet_background = any(_background(_cascade(tinycss2.parse_declaration_list(r.content, skip_comments=True,
                                                                                 skip_whitespace=True))) for r in rules)
    hidden = [tag for tag in tags if tag.has_attr("hidden")]
    for tag in tags:
        own = tag.get("style") or ""
        why, background = _inline_style(own) if own else ("", False)
        on_background[id(tag)] = (on_background.get(id(tag.parent), False) or background
                                  or (tag.has_attr("bgcolor") and str(tag["bgcolor"]).strip().lower() not in ("white", "#fff", "#ffffff")))
        if why and not (why == "colour" and (sheet_background or on_background.get(id(tag.parent), False) or background)):
            hidden.append(tag)
    hidden += [tag for tag in tags if _unshown(tag)]
    for closed in soup.find_all("details"):  # closed: only its summary shows
        if not closed.has_attr("open"):
            hidden += [c for c in closed.children if not (isinstance(c, Tag) and c.name == "summary")]
    hiding = [(r, why) for r in rules
              if (why := _hides(tinycss2.parse_declaration_list(r.content, skip_comments=True, skip_whitespace=True)))
              and not (why == "colour" and sheet_background)]
    selectors = [sel for rule, _ in hiding for sel in _selectors(rule.prelude)]
    # Matching one compound selector ("div", ".x", "span.k") against every element is the unit of work.
    work = sum(len(sel.replace(">", " ").replace("+", " ").replace("~", " ").split()) for sel in selectors) * len(tags)
    if work > MAX_STYLE_WORK:
        raise ValueError(f"{len(selectors)} hiding style selectors over {len(tags)} elements is more than can be checked "
                         "for hidden text; convert the page to text first")
    for selector in selectors:
        try:
            hidden += soup.select(selector)
        except (SelectorSyntaxError, NotImplementedError):  # :hover, ::first-line, vendor pseudo-classes
            continue
    return hidden


def html_text(html: str, name: str = "page") -> str:
    """The text a browser shows of ``html``, page chrome left out, structure kept as
    Markdown-like lines (``name`` only labels the warning)."""
    return html_page(html, name)[0]


# A first heading that names no page ("1. Overview", "Introduction", "Main Page"): the page's
# <title> says more ("Overview — Flask" -> "Overview" is still generic; og:title is tried first).
_GENERIC_HEADING = rx.compile(r"(?i)^(?:[0-9]+(?:\.[0-9]+)*\.?[ \t]+|[IVX]+\.[ \t]+)?(?:overview|introduction|intro|"
                              r"contents|table of contents|index|home|welcome|summary|preface|foreword|about|"
                              r"getting started|documentation|readme|untitled|main page|general|description|notes?)[ \t.:]*$")
_TITLE_SEPARATORS = (" — ", " – ", " | ", " :: ", " - ")


def generic_heading(heading: str) -> bool:
    """``heading`` names no page: a number and "Overview", "Introduction", "Contents", ..."""
    return _GENERIC_HEADING.match(heading.strip()) is not None


def _page_title(soup) -> str:
    """og:title, else <title> without the site's name after a separator ("Queries — Django 3.2")."""
    og = soup.find("meta", attrs={"property": "og:title"})
    candidates = [str(og.get("content") or "") if og else "", soup.title.get_text(" ", strip=True) if soup.title else ""]
    for title in candidates:
        title = " ".join(title.split())
        for sep in _TITLE_SEPARATORS:
            head = title.split(sep, 1)[0].strip()
            if head and head != title:
                title = head
                break
        if title and not generic_heading(title):
            return title[:200]
    return ""


_FIRST_HEADING = rx.compile(r"(?m)^#{1,2}[ \t]+(\S[^\n]*)$")


def html_page(html: str, name: str = "page") -> tuple[str, str]:
    """(the text a browser shows of ``html``, its title when the text's first heading names no
    page, else ""): ``load.parse_upload`` records that title in the document's meta."""
    from bs4 import BeautifulSoup, CData, Tag  # core dependency; imported late to keep start-up fast

    # A repeated attribute keeps its first value, as browsers do (not the parser's default, the last).
    soup = BeautifulSoup(html, "html.parser", on_duplicate_attribute="ignore")
    title = _page_title(soup)
    hidden = _hidden_elements(soup, name)  # before <style> goes: its rules hide elements too
    _remember(html, _texts_of(soup, hidden))  # screening reads them next: one parse, not two
    # Said only of what the text would otherwise hold: a hidden search box or menu is page chrome,
    # left out anyway (every Sphinx page hides its search box: a line per page said nothing).
    # Screening reads every hidden text all the same (``_remember``).
    told = _outside_chrome(soup, hidden)
    for tag in soup(["script", "style", "noscript", "template"]):
        tag.decompose()
    for cdata in soup.find_all(string=lambda s: isinstance(s, CData)):  # a bogus comment in HTML
        cdata.extract()
    if told:
        log.warning("%s: dropped %d element(s) a browser would not show (hidden, display:none, visibility, "
                    "zero size, opacity or font, white or transparent text, off-screen, clipped, fallback "
                    "content, closed details)", name, len(told))
    if hidden:
        for node in hidden:
            if isinstance(node, Tag):
                if not node.decomposed:
                    node.decompose()
            else:
                node.extract()
    main = _main(soup)
    for tag in [t for t in main.find_all(True) if _chrome(t)]:
        if not tag.decomposed:
            tag.decompose()
    text = _render(main)
    first = _FIRST_HEADING.search(text[:20_000])
    return text, title if title and (first is None or generic_heading(first.group(1))) else ""


def hidden_texts(markup: str) -> list[str]:
    """What a reader of ``markup`` (an HTML page, or Markdown with inline HTML) never sees:
    the text of the elements ``html_text`` drops as hidden, and comments. For screening
    uploads (``screen.hidden``): dropping hidden text keeps it from the model, and its
    presence says something about the author."""
    from bs4 import BeautifulSoup

    with _seen_lock:
        seen = _SEEN.get(markup)
    if seen is not None:
        return list(seen)
    soup = BeautifulSoup(markup, "html.parser", on_duplicate_attribute="ignore")
    return _texts_of(soup, _hidden_elements(soup, "upload"))


def _texts_of(soup, hidden: list) -> list[str]:
    """The texts of ``hidden`` (outermost elements) and of the comments of ``soup``."""
    from bs4 import Comment, Tag

    # The outermost only (a hidden element inside a hidden parent says nothing new), and at most
    # MAX_HIDDEN of them: each text walks the element's subtree, so nested hidden elements would
    # otherwise cost the square of the page (a 1 MB page of nested divs: minutes).
    marked = {id(node) for node in hidden}
    outer = [node for node in hidden if id(node.parent) not in marked][:MAX_HIDDEN]
    found = [node.get_text(" ", strip=True)[:MAX_HIDDEN_CHARS] if isinstance(node, Tag) else str(node).strip()
             for node in outer]
    found += [str(c).strip()[:MAX_HIDDEN_CHARS] for c in soup.find_all(string=lambda s: isinstance(s, Comment))][:MAX_HIDDEN]
    return [t for t in found if t]


# The hidden texts of the last pages ``html_text`` read, by markup: screening an ingested page
# asks for them right after it is loaded (a dict is ordered: the oldest goes first).
_SEEN: dict[str, tuple[str, ...]] = {}
_SEEN_PAGES = 8
_seen_lock = threading.Lock()


def _remember(markup: str, texts: list[str]) -> None:
    with _seen_lock:
        _SEEN[markup] = tuple(texts)
        while len(_SEEN) > _SEEN_PAGES:
            _SEEN.pop(next(iter(_SEEN)))


MAX_HIDDEN = 64  # hidden elements (and comments) read per page: enough to tell, bounded in cost
MAX_HIDDEN_CHARS = 2000


# Block elements end a line; everything else is inline and flows into its paragraph.
_BLOCKS = frozenset("""address article aside blockquote body caption dd details dialog div dl dt fieldset figcaption
figure footer form h1 h2 h3 h4 h5 h6 header hr legend main nav ol p section summary table tbody tfoot
thead ul""".split())
_HEADINGS = {"h1": "# ", "h2": "## ", "h3": "### ", "h4": "#### ", "h5": "##### ", "h6": "###### "}
# Page chrome: navigation, search boxes, footers, Sphinx/MkDocs sidebars and permalink marks,
# mdBook's menu bar, sidebar, search box, "previous/next" arrows and keyboard-help pop-up (ids
# with and without the "mdbook-" prefix newer versions use). Mostly outside <main>, which is
# read alone when there is one; these catch pages without it.
_CHROME = ("nav", "footer", "#footer", ".footer", "#toc", "[role=navigation]", "[role=search]", "[role=contentinfo]",
           "[role=banner]", ".sphinxsidebar", ".related", ".headerlink", ".md-sidebar", ".md-header", ".md-footer",
           ".md-source-file", "button", "select", "#mdbook-help-container", "#mdbook-sidebar", "#sidebar",
           "#mdbook-menu-bar", "#menu-bar", "#mdbook-search-wrapper", "#search-wrapper", ".nav-chapters",
           ".mobile-nav-chapters")
# The same selectors, by what they test, for one pass over the tree (``_chrome``).
_CHROME_NAMES = frozenset(c for c in _CHROME if c[0] not in "#.[")
_CHROME_IDS = frozenset(c[1:] for c in _CHROME if c[0] == "#")
_CHROME_CLASSES = frozenset(c[1:] for c in _CHROME if c[0] == ".")
_CHROME_ROLES = frozenset(c[len("[role="):-1] for c in _CHROME if c.startswith("[role="))


def _outside_chrome(soup, nodes: list) -> list:
    """The ``nodes`` not inside page chrome (``_chrome``), in one pass over the tree (document
    order: a parent is met before its children), so deep nesting costs no more than wide."""
    from bs4 import Tag

    inside: set[int] = set()
    for tag in soup.find_all(True):
        if id(tag.parent) in inside or _chrome(tag):
            inside.add(id(tag))
    return [n for n in nodes if id(n if isinstance(n, Tag) else n.parent) not in inside]


def _chrome(tag) -> bool:
    """``tag`` matches one of ``_CHROME``."""
    if tag.name in _CHROME_NAMES or tag.get("id") in _CHROME_IDS or tag.get("role") in _CHROME_ROLES:
        return True
    classes = tag.get("class") or ()
    return any(c in _CHROME_CLASSES for c in classes)


_LINK_DENSITY = 0.85  # share of a list's text inside links above which it is navigation


def _main(soup):
    """The page's content element when it marks exactly one (``role=main``, ``<main>``, ``<article>``,
    in that order). One walk over the tree collects all three (a CSS select per kind walked it
    three times: 12% of reading a big reference page)."""
    found: dict[str, list] = {"role": [], "main": [], "article": []}
    for tag in soup.find_all(True):
        if tag.get("role") == "main":
            found["role"].append(tag)
        if tag.name in ("main", "article"):
            found[tag.name].append(tag)
    for kind in ("role", "main", "article"):
        if len(found[kind]) == 1:
            return found[kind][0]
    return soup.body or soup


def _navigation(node) -> bool:
    """A list or table that is nearly all links (a table of contents, an index, a site
    menu): navigation, not content. Link density is the classic boilerplate signal."""
    links = node.find_all("a")
    if len(links) < 5:
        return False
    total = len(re.sub(r"\s+", "", node.get_text()))
    linked = sum(len(re.sub(r"\s+", "", a.get_text())) for a in links)
    return total > 0 and linked >= _LINK_DENSITY * total


def _render(root) -> str:
    """The text of ``root`` with Markdown-like structure: "#" headings, "- " list items,
    fenced <pre> blocks, backticked inline code, a line per block, table cells joined
    by " | ", navigation lists left out. Iterative and linear: nesting depth and row
    width are the page's choice, not ours."""
    from bs4 import NavigableString, Tag

    out: list[str] = []
    # (node or literal text, closing?, inside a list or table already judged, inside one item/cell line)
    stack: list[tuple[object, bool, bool, bool]] = [(root, False, False, False)]
    while stack:
        node, closing, in_list, on_line = stack.pop()
        if closing or isinstance(node, str) and not isinstance(node, NavigableString):
            out.append((" " if on_line else "\n\n") if closing else str(node))
            continue
        if isinstance(node, NavigableString):
            if type(node) is NavigableString:  # not a Comment, Doctype or declaration
                out.append(re.sub(r"\s+", " ", str(node)))
            continue
        if not isinstance(node, Tag):
            continue
        name = node.name
        if name == "pre":
            code = node.get_text()
            if code.strip():
                out.append(fence(code))
            continue
        if name == "br":
            out.append(" " if on_line else "\n")
            continue
        if name == "code":
            text = re.sub(r"\s+", " ", node.get_text()).strip()
            if text:
                out.append(f"`{text}`")
            continue
        if name in ("ul", "ol", "dl", "table") and not in_list:
            if _navigation(node):
                continue
            in_list = True
        if name in ("li", "tr"):  # one line each, the list or table keeps them together
            out.append("\n- " if name == "li" else "\n")
            on_line = True  # a <p> or <div> inside an item or a cell flows into its line
        elif name in _HEADINGS:  # a heading is its own line wherever it is, never part of an item
            out.append("\n\n" + _HEADINGS[name])
            stack.append((node, True, in_list, False))
            on_line = False
        elif name in _BLOCKS:
            out.append(" " if on_line else "\n\n" + _HEADINGS.get(name, ""))
            stack.append((node, True, in_list, on_line))
        children: list[tuple[object, bool, bool, bool]] = []
        cells = 0
        for child in node.contents:
            if name == "tr" and isinstance(child, Tag) and child.name in ("td", "th"):
                cells += 1
                if cells > 1:
                    children.append((" | ", False, in_list, on_line))  # cells of one row stay on its line
            children.append((child, False, in_list, on_line))
        stack.extend(reversed(children))
    return _EMPTY_ITEM.sub("", layout("".join(out))).strip()


_EMPTY_ITEM = rx.compile(r"(?m)^-[ \t]*(?:\n|\z)")  # an item whose text moved to the heading that began it
