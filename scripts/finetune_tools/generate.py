#!/usr/bin/env python3
"""Synthetic tool-calling requests for an app's own tool files, as JSONL.

    python generate.py --tools examples/tools/*.json [--hints hints.json] -n 4000 -o data.jsonl

Each line is one training example:
    {"variant": "plain" | "trigger", "system": ..., "user": ..., "answer": ...,
     "tool": NAME or null, "arguments": {...} or null}
`system` is byte for byte the system turn `lilims run --tools F1 --tools F2 ...`
renders (runtime::tools_system_prompt in runtime/constrain/tools.cpp), without a trigger
for "plain" and with `--trigger "<tool_call>"` for "trigger". `answer` is what
the model should write after `<|im_start|>assistant\\n`, ending in <|im_end|>:
    plain:   {"name":"open_app","arguments":{"app":"camera"}}<|im_end|>
    trigger: <tool_call>{"name":...,"arguments":{...}}</tool_call><|im_end|>
             or a short plain-text answer when no tool fits.
Requests are driven by the tool files alone (property names, types, enums,
ranges, descriptions); a hints file (hints.json beside this script) adds
hand-written phrasings per tool name and is optional.

The module also holds what train.py and evaluate.py share: the tool-file
parser, the system prompt, the ChatML rendering and the call's JSON.
"""
import argparse
import json
import random
import re
import sys

TRIGGER = "<tool_call>"
TRIGGER_CLOSE = "</tool_call>"
IM_END = "<|im_end|>"

# ---------------------------------------------------------------------------
# What lilims renders (runtime/constrain/tools.cpp, tokenizer/chat.cpp)
# ---------------------------------------------------------------------------


def dump(value):
    """nlohmann::ordered_json::dump(): compact, keys in their order, UTF-8 kept."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def parse_tools_text(text, origin="tools"):
    """The tools in one file, as runtime::parse_tools reads them: one tool
    object or an array, each optionally {"type": "function", "function": {...}}."""
    j = json.loads(text)
    if isinstance(j, dict):
        j = [j]
    if not isinstance(j, list):
        raise ValueError(f"{origin}: the tools must be a JSON array or one tool object")
    out = []
    for item in j:
        f = item["function"] if isinstance(item, dict) and "function" in item else item
        if not isinstance(f, dict) or not isinstance(f.get("name"), str):
            raise ValueError(f'{origin}: each tool must be an object with a string "name"')
        desc = f.get("description", "")
        if not isinstance(desc, str):
            raise ValueError(f"{origin}: the description of '{f['name']}' must be a string")
        params = f.get("parameters")
        if params is None and "parameters" not in f:
            params = {"type": "object", "properties": {}}
        if not isinstance(params, dict):
            raise ValueError(f"{origin}: the parameters of '{f['name']}' must be a JSON Schema object")
        out.append({"name": f["name"], "description": desc, "parameters": params})
    return out


def load_tools(paths):
    tools = []
    for p in paths:
        with open(p, encoding="utf-8") as fh:
            tools += parse_tools_text(fh.read(), p)
    if not tools:
        raise ValueError("the list of tools is empty")
    names = [t["name"] for t in tools]
    for n in names:
        if not n:
            raise ValueError("a tool has no name")
        if names.count(n) > 1:
            raise ValueError(f"two tools are named '{n}'")
    return tools


def tools_system_prompt(tools, trigger=""):
    """runtime::tools_system_prompt, byte for byte."""
    out = "You can call these tools:\n"
    for t in tools:
        out += dump({"name": t["name"], "description": t["description"],
                     "parameters": t["parameters"]}) + "\n"
    if not trigger:
        out += ('To call a tool, answer with one JSON object: '
                '{"name": <the tool\'s name>, "arguments": <its arguments>}.')
    else:
        out += ("To call a tool, write " + trigger + ' and then one JSON object: '
                '{"name": <the tool\'s name>, "arguments": <its arguments>}. '
                "When no tool fits, answer in plain text.")
    return out


def tools_schema(tools):
    """runtime::tools_schema: the JSON Schema the constrained decoder follows."""
    return {"anyOf": [{"type": "object",
                       "properties": {"name": {"const": t["name"]}, "arguments": t["parameters"]},
                       "required": ["name", "arguments"],
                       "additionalProperties": False} for t in tools]}


def chatml_segments(system, user):
    """SmolLM2's ChatML template as lilims renders it: (text, is_markup) pieces.
    Markup is parsed for special tokens, the messages are not; lilims encodes
    each piece on its own, so the tokenizer sees the same boundaries here."""
    return [("<|im_start|>system\n", True), (system, False), ("<|im_end|>\n", True),
            ("<|im_start|>user\n", True), (user, False), ("<|im_end|>\n", True),
            ("<|im_start|>assistant\n", True)]


def render_chatml(system, user):
    return "".join(s for s, _ in chatml_segments(system, user))


def call_json(tool, args):
    """The call as the constrained decoder writes it: compact, properties in schema order."""
    props = list((tool["parameters"].get("properties") or {}).keys())
    ordered = {k: args[k] for k in props if k in args}
    return dump({"name": tool["name"], "arguments": ordered})


# ---------------------------------------------------------------------------
# Words
# ---------------------------------------------------------------------------

ONES = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten",
        "eleven", "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen",
        "nineteen"]
TENS = ["", "", "twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety"]


def number_words(n):
    if n < 0:
        return "minus " + number_words(-n)
    if n < 20:
        return ONES[n]
    if n < 100:
        return TENS[n // 10] + ("" if n % 10 == 0 else "-" + ONES[n % 10])
    if n < 1000:
        rest = n % 100
        return ONES[n // 100] + " hundred" + ("" if rest == 0 else " and " + number_words(rest))
    if n < 1000000:
        rest = n % 1000
        return number_words(n // 1000) + " thousand" + ("" if rest == 0 else
                                                        (" and " if rest < 100 else " ") + number_words(rest))
    return str(n)


def say_number(rng, n, words_p=0.35):
    """A number as a person types or says it."""
    if n <= 20 and rng.random() < words_p + 0.15:
        return number_words(n)
    if n <= 100 and rng.random() < words_p:
        return number_words(n)
    if n >= 1000 and rng.random() < 0.2:
        return f"{n:,}"
    return str(n)


def words_of(identifier):
    """"duration_seconds" -> "duration seconds"; "maxResults" -> "max results"."""
    s = re.sub(r"([a-z])([A-Z])", r"\1 \2", identifier)
    return re.sub(r"[_\-.]+", " ", s).strip().lower()


STOPWORDS = set("a an the of to for and or in on at by with from is are be this that it its your "
                "you my me i can will when which what as into onto".split())

# Verbs a tool's name may start with, and how people say them.
VERB_SYNONYMS = {
    "open": ["open", "launch", "start", "bring up", "pull up", "fire up", "open up", "go to", "show me"],
    "launch": ["launch", "open", "start", "fire up"],
    "start": ["start", "begin", "kick off", "set off", "launch"],
    "stop": ["stop", "end", "cancel", "halt"],
    "set": ["set", "start", "change", "adjust"],
    "send": ["send", "shoot", "fire off"],
    "take": ["take", "snap", "capture", "grab", "shoot"],
    "play": ["play", "put on", "start playing", "queue up"],
    "pause": ["pause", "hold"],
    "call": ["call", "phone", "ring", "dial"],
    "search": ["search for", "look up", "find", "search"],
    "find": ["find", "look up", "search for", "locate"],
    "get": ["get", "fetch", "show", "give me", "tell me"],
    "show": ["show", "display", "bring up", "let me see"],
    "check": ["check", "look at", "show"],
    "create": ["create", "make", "add", "set up"],
    "add": ["add", "put", "create", "insert"],
    "delete": ["delete", "remove", "erase", "get rid of"],
    "remove": ["remove", "delete", "take off"],
    "turn": ["turn", "switch"],
    "enable": ["enable", "turn on", "switch on", "activate"],
    "disable": ["disable", "turn off", "switch off", "deactivate"],
    "book": ["book", "reserve", "schedule"],
    "schedule": ["schedule", "book", "set up", "plan"],
    "navigate": ["navigate to", "take me to", "get me to", "guide me to", "route me to", "drive me to",
                 "give me directions to", "show me the way to"],
    "share": ["share", "send"],
    "record": ["record", "capture", "start recording"],
    "translate": ["translate", "convert"],
    "update": ["update", "change", "edit", "modify"],
    "read": ["read", "read out", "show"],
    "lock": ["lock", "secure"],
    "unlock": ["unlock", "open"],
    "buy": ["buy", "order", "purchase", "get"],
    "order": ["order", "buy", "get"],
    "log": ["log", "record", "track", "note down"],
    "save": ["save", "store", "keep"],
    "remind": ["remind me", "set a reminder"],
}

# Spoken synonyms of common enum members (a hints file can add its own).
ENUM_SYNONYMS = {
    "camera": ["camera", "cam", "camera app"],
    "photos": ["photos", "pics", "pictures", "gallery", "photo gallery", "photo album", "camera roll",
               "my photos", "images"],
    "gallery": ["gallery", "photos", "pics", "pictures"],
    "messages": ["messages", "texts", "messaging", "SMS", "my messages", "text messages", "inbox"],
    "maps": ["maps", "map", "the map", "navigation", "GPS"],
    "music": ["music", "music player", "songs", "my music", "tunes", "the music app"],
    "settings": ["settings", "preferences", "the settings", "system settings", "setup", "config"],
    "calendar": ["calendar", "agenda", "schedule", "my calendar", "planner"],
    "clock": ["clock", "alarms", "clock app", "alarm clock", "stopwatch"],
    "phone": ["phone", "dialer", "phone app", "dial pad", "call log"],
    "weather": ["weather", "forecast", "weather app", "weather forecast"],
    "email": ["email", "mail", "inbox", "e-mail"],
    "contacts": ["contacts", "address book", "people"],
    "notes": ["notes", "notepad", "my notes"],
    "browser": ["browser", "web browser", "internet"],
    "driving": ["driving", "by car", "in the car", "for driving", "car"],
    "walking": ["walking", "on foot", "by walking", "for walking", "walk"],
    "cycling": ["cycling", "by bike", "on my bike", "by bicycle", "biking"],
    "transit": ["transit", "by public transport", "by bus", "by train", "by subway",
                "using public transit", "on public transport"],
    "front": ["front", "front-facing", "selfie", "front cam"],
    "back": ["back", "rear", "main", "back cam"],
    "low": ["low", "quiet", "soft", "minimum"],
    "medium": ["medium", "normal", "mid"],
    "high": ["high", "loud", "max", "maximum"],
    "on": ["on", "enabled"],
    "off": ["off", "disabled"],
    "celsius": ["celsius", "centigrade", "°C"],
    "fahrenheit": ["fahrenheit", "°F"],
}

FIRST_NAMES = ["Ana", "John", "Maria", "David", "Sarah", "Tom", "Emma", "Liam", "Olivia", "Noah",
               "Sophia", "Lucas", "Mia", "Ethan", "Chloe", "James", "Ava", "Ben", "Zoe", "Alex",
               "Sam", "Priya", "Raj", "Yuki", "Kenji", "Fatima", "Omar", "Lena", "Marco", "Giulia",
               "Pierre", "Camille", "Hans", "Ingrid", "Carlos", "Lucia", "Wei", "Mei", "Kofi",
               "Amara", "Jack", "Grace", "Daniel", "Nina", "Oscar", "Ruby", "Leo", "Ivy", "Max",
               "Hannah", "Mike", "Jess", "Chris", "Kate", "Paul", "Laura", "Diego", "Sofia", "Aisha",
               "Tariq", "Ellie", "Ryan", "Megan", "Josh", "Amy", "Nick", "Rachel", "Steve", "Julia"]
LAST_NAMES = ["Smith", "Garcia", "Chen", "Müller", "Rossi", "Dubois", "Kim", "Patel", "Okafor",
              "Silva", "Novak", "Johnson", "Brown", "Tanaka", "Ivanova", "Nguyen", "Lopez", "Cohen"]
FAMILY = ["Mom", "Dad", "Grandma", "Grandpa", "Mum", "Auntie May", "Uncle Bob"]
CITIES = ["Paris", "London", "Berlin", "Madrid", "Rome", "Lisbon", "Amsterdam", "Vienna", "Prague",
          "Tokyo", "Osaka", "Seoul", "New York", "Boston", "Chicago", "San Francisco", "Seattle",
          "Toronto", "Montreal", "Sydney", "Melbourne", "Dublin", "Edinburgh", "Barcelona",
          "Munich", "Zurich", "Oslo", "Stockholm", "Copenhagen", "Brooklyn", "Oakland", "Austin",
          "Denver", "Nairobi", "Cape Town", "Mexico City", "Buenos Aires", "Istanbul", "Athens"]
PLACES = ["the airport", "the train station", "home", "work", "the office", "the nearest gas station",
          "the closest pharmacy", "Central Park", "the Eiffel Tower", "the Louvre", "Golden Gate Bridge",
          "the city center", "downtown", "the hospital", "the beach", "the mall", "the gym",
          "the nearest supermarket", "Union Station", "the stadium", "the zoo", "the library",
          "the university", "Times Square", "the bus station", "a coffee shop nearby"]
STREETS = ["Main Street", "Baker Street", "Oak Avenue", "Market Street", "Elm Street", "5th Avenue",
           "Sunset Boulevard", "King's Road", "Rue de Rivoli", "High Street", "Maple Drive"]
MESSAGES = ["I'm running late", "on my way", "see you at 7", "can you pick up milk?",
            "happy birthday!", "call me when you're free", "dinner is ready", "I'll be home in 20 minutes",
            "running 10 minutes late, sorry", "the meeting moved to 3pm", "did you feed the cat?",
            "love you", "good luck today!", "I'm outside", "where are you?", "let's grab lunch tomorrow",
            "thanks for yesterday", "the package arrived", "don't forget your keys", "I'm at the station",
            "can we talk later?", "traffic is terrible", "save me a seat", "bring an umbrella",
            "we're out of coffee", "I landed safely", "leaving now", "congrats on the new job!",
            "the kids are asleep", "I'll call you back", "meet me at the entrance", "sounds good",
            "are we still on for tonight?", "I got the tickets", "please lock the door",
            "heading to the gym", "can you send me the address?", "I miss you", "be there in five",
            "the car is fixed", "happy anniversary", "I'll bring dessert", "no worries",
            "pick me up at 6", "what time is the game?", "we need more eggs", "call the plumber please"]
LABELS = ["pasta", "eggs", "tea", "laundry", "pizza", "workout", "nap", "bread", "meeting", "parking",
          "rice", "cookies", "plank", "break", "homework", "meditation", "steak", "oven", "coffee",
          "study session", "yoga", "stretching", "the roast", "soup", "potatoes", "cake", "reading",
          "brush teeth", "call", "dishwasher"]
QUERIES = ["italian restaurants", "cheap flights to Rome", "how to fix a flat tire", "best pizza nearby",
           "weekend events", "jazz concerts", "vegan recipes", "hiking trails", "used bikes",
           "movie times", "the news", "coffee shops", "phone repair", "hotels in Lisbon"]
TOPICS = ["groceries", "the report", "project ideas", "birthday party", "vacation plans", "dentist",
          "car service", "book club", "gift list", "team lunch", "movie night", "gym plan"]
SONGS = ["Bohemian Rhapsody", "Imagine", "Hey Jude", "Yesterday", "Clair de Lune", "Blinding Lights",
         "Shape of You", "Hotel California", "Wonderwall", "Let It Be", "Jolene", "Dancing Queen"]
URLS = ["example.com", "wikipedia.org", "news.ycombinator.com", "github.com", "bbc.co.uk"]

# ---------------------------------------------------------------------------
# Arguments: a JSON value and how the request says it
# ---------------------------------------------------------------------------

DURATION_UNITS = [("millisecond", 0.001), ("ms", 0.001), ("second", 1), ("sec", 1), ("minute", 60),
                  ("min", 60), ("hour", 3600), ("hr", 3600)]


def duration_unit(name, schema):
    """Seconds per unit when the property is a duration, else None."""
    text = words_of(name) + " " + str(schema.get("description", "")).lower()
    if not re.search(r"duration|timeout|delay|interval|length|seconds?|minutes?|hours?|\bms\b|"
                     r"milliseconds?|\bsecs?\b|\bmins?\b|\bhrs?\b", text):
        return None
    for word, unit in DURATION_UNITS:
        if re.search(r"\b" + word + "s?\\b", text):
            return unit
    return 1 if "duration" in text or "timeout" in text or "delay" in text else None


def spoken_duration(rng, seconds):
    """(noun forms, adjective forms) for a number of seconds, as people say them."""
    nouns, adjs = [], []
    n = lambda k: say_number(rng, k)
    h, rem = divmod(seconds, 3600)
    m, s = divmod(rem, 60)
    if seconds < 60:
        nouns += [f"{n(seconds)} seconds", f"{seconds} secs", f"{seconds}s", f"{n(seconds)} sec"]
        adjs += [f"{n(seconds)}-second", f"{seconds} second"]
        if seconds == 30:
            nouns += ["half a minute", "thirty seconds"]
    elif h == 0 and s == 0:
        if m == 1:
            nouns += ["a minute", "one minute", "1 min", "60 seconds"]
            adjs += ["one-minute", "1 minute"]
        else:
            nouns += [f"{n(m)} minutes", f"{m} min", f"{m} mins", f"{n(m)} minutes", f"{m}m"]
            adjs += [f"{n(m)}-minute", f"{m} minute", f"{m} min"]
        if m == 15:
            nouns += ["a quarter of an hour", "quarter of an hour", "a quarter hour"]
        if m == 30:
            nouns += ["half an hour", "a half hour", "half hour"]
            adjs += ["half-hour", "half hour"]
        if m == 45:
            nouns += ["three quarters of an hour"]
        if m == 90:
            nouns += ["an hour and a half", "one and a half hours", "1.5 hours"]
        if m < 3:
            nouns += [f"{seconds} seconds"]
    elif h == 0:
        if s == 30 and m < 10:
            nouns += [f"{n(m)} and a half minutes" if m > 1 else "a minute and a half",
                      f"{n(m)} minutes and thirty seconds", f"{m}:30", f"{m} min 30 sec"]
            if m == 1:
                nouns += ["90 seconds", "ninety seconds", "one and a half minutes", "1.5 minutes"]
            adjs += [f"{m} and a half minute"]
        else:
            nouns += [f"{n(m)} minutes and {n(s)} seconds", f"{m} min {s} sec", f"{m}m {s}s",
                      f"{m} minute{'s' if m > 1 else ''} {s} seconds"]
            if seconds < 300:
                nouns += [f"{seconds} seconds"]
    else:
        if rem == 0:
            if h == 1:
                nouns += ["an hour", "one hour", "1 hour", "1 hr", "60 minutes"]
                adjs += ["one-hour", "1 hour", "hour-long", "hour"]
            else:
                nouns += [f"{n(h)} hours", f"{h} hrs", f"{h}h", f"{n(h)} hours"]
                adjs += [f"{n(h)}-hour", f"{h} hour"]
        elif s == 0:
            if m == 30:
                nouns += [f"{n(h)} and a half hours" if h > 1 else "an hour and a half",
                          f"{h}.5 hours", f"{h} hours 30 minutes" if h > 1 else "1 hour 30 minutes"]
                if h == 1:
                    nouns += ["90 minutes", "ninety minutes", "one and a half hours"]
            nouns += [f"{n(h)} hour{'s' if h > 1 else ''} and {n(m)} minutes",
                      f"{h}h{m:02d}", f"{h} hr {m} min", f"{h}:{m:02d} hours"]
            if seconds < 3 * 3600 and rng.random() < 0.3:
                nouns += [f"{seconds // 60} minutes"]
        else:
            nouns += [f"{h} hour{'s' if h > 1 else ''}, {m} minutes and {s} seconds", f"{h}h {m}m {s}s"]
    if not adjs:
        adjs = [nouns[0]]
    return nouns, adjs


# Durations people ask for most: drawn often, so that a small model sees each
# one's conversion to the schema's unit many times (the arithmetic is the hard part).
COMMON_SECONDS = [30, 45, 60, 90, 120, 180, 240, 300, 360, 420, 480, 540, 600, 720, 900, 1200, 1500,
                  1800, 2400, 2700, 3600, 5400, 7200, 10800]


def sample_seconds(rng):
    if rng.random() < 0.6:
        return rng.choice(COMMON_SECONDS)
    r = rng.random()
    if r < 0.15:
        return rng.choice([5, 10, 15, 20, 30, 40, 45, 50])
    if r < 0.55:
        return 60 * rng.choice([1, 2, 3, 4, 5, 5, 6, 7, 8, 10, 10, 12, 15, 15, 20, 25, 30, 30, 40, 45, 50])
    if r < 0.65:
        return 60 * rng.randint(1, 9) + 30
    if r < 0.72:
        return 60 * rng.randint(1, 20) + rng.choice([5, 10, 15, 20, 40, 45])
    if r < 0.88:
        return 3600 * rng.choice([1, 1, 2, 2, 3, 4, 5, 8])
    return 3600 * rng.choice([1, 1, 2, 3]) + 60 * rng.choice([5, 10, 15, 20, 30, 30, 45])


class Value:
    """One argument: its JSON value and the forms a request may spell it in."""

    def __init__(self, value, forms, literal=False):
        self.value = value
        self.forms = forms  # {form name: [surface strings]}; "" is the default form
        self.literal = literal  # the surface is the value (strings the model copies)

    def say(self, rng, form=""):
        options = self.forms.get(form) or self.forms.get("")
        return rng.choice(options)


def string_kind(name, schema, context=""):
    """What a string property holds, from its name, its description and the
    tool's name and description (`context`)."""
    text = words_of(name)
    desc = str(schema.get("description", "")).lower()
    both = text + " " + desc
    fmt = schema.get("format", "")
    if fmt in ("date", "time", "date-time", "email", "uri"):
        return fmt
    rules = [
        ("person", r"recipient|contact|person|callee|friend|who|attendee|\bto\b|\bname\b(?!.*(file|label|title))"),
        ("place", r"destination|location|place|address|city|origin|\bfrom\b|where|venue|route"),
        ("message", r"\btext\b|message|body|content|note|\bmsg\b|comment"),
        ("label", r"label|title|tag|subject|caption"),
        ("query", r"query|search|term|keyword|\bq\b"),
        ("song", r"song|track|artist|album|playlist|music"),
        ("url", r"\burl\b|link|website|site"),
        ("topic", r"topic|list|item|task|event"),
    ]
    for kind, pat in rules:
        if re.search(pat, text):
            if kind == "label" and re.search(r"song|music|track|album|playlist", context.lower()):
                return "song"
            return kind
    for kind, pat in rules:
        if re.search(pat, desc):
            return kind
    return "thing" if not both.strip() else "topic"


def person_value(rng):
    r = rng.random()
    if r < 0.55:
        name = rng.choice(FIRST_NAMES)
    elif r < 0.75:
        name = rng.choice(FIRST_NAMES) + " " + rng.choice(LAST_NAMES)
    else:
        name = rng.choice(FAMILY)
    return name


def place_value(rng):
    r = rng.random()
    if r < 0.4:
        return rng.choice(CITIES)
    if r < 0.8:
        return rng.choice(PLACES)
    if r < 0.92:
        return f"{rng.randint(1, 250)} {rng.choice(STREETS)}"
    return f"{rng.choice(STREETS)}, {rng.choice(CITIES)}"


def fit_length(rng, pick, schema, tries=20):
    lo, hi = schema.get("minLength", 1), schema.get("maxLength", 10 ** 6)
    for _ in range(tries):
        v = pick()
        if lo <= len(v) <= hi:
            return v
    return "x" * max(lo, 1)


def string_value(rng, name, schema, hint_pool, context=""):
    kind = string_kind(name, schema, context)
    if hint_pool and rng.random() < 0.7:
        return fit_length(rng, lambda: rng.choice(hint_pool), schema)
    pools = {
        "person": lambda: person_value(rng),
        "place": lambda: place_value(rng),
        "message": lambda: rng.choice(MESSAGES),
        "label": lambda: rng.choice(LABELS),
        "query": lambda: rng.choice(QUERIES),
        "song": lambda: rng.choice(SONGS),
        "url": lambda: rng.choice(URLS),
        "topic": lambda: rng.choice(TOPICS),
        "thing": lambda: rng.choice(TOPICS + LABELS),
        "email": lambda: f"{rng.choice(FIRST_NAMES).lower()}@example.com",
        "uri": lambda: "https://" + rng.choice(URLS),
    }
    if kind == "date":
        y, mo, d = rng.choice([2025, 2026]), rng.randint(1, 12), rng.randint(1, 28)
        iso = f"{y:04d}-{mo:02d}-{d:02d}"
        month = ["January", "February", "March", "April", "May", "June", "July", "August", "September",
                 "October", "November", "December"][mo - 1]
        return iso, [iso, f"{month} {d}, {y}", f"{d} {month} {y}"]
    if kind == "time":
        hh, mm = rng.randint(0, 23), rng.choice([0, 15, 30, 45, 5, 10])
        iso = f"{hh:02d}:{mm:02d}"
        return iso, [iso]
    if kind == "date-time":
        iso = f"2025-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}T{rng.randint(0, 23):02d}:00:00"
        return iso, [iso]
    v = fit_length(rng, pools[kind], schema)
    return v, [v]


def enum_forms(member, hints_syn):
    """Surface forms of an enum member by form name."""
    if isinstance(member, str) and member in hints_syn:
        h = hints_syn[member]
        return h if isinstance(h, dict) else {"": h}
    if isinstance(member, str):
        base = ENUM_SYNONYMS.get(member.lower(), [])
        spoken = words_of(member)
        forms = [spoken] + [b for b in base if b != spoken]
        return {"": forms}
    return {"": [json.dumps(member)]}


def bool_forms(name, truth, hint):
    if hint and (str(truth).lower() in hint):
        h = hint[str(truth).lower()]
        return h if isinstance(h, dict) else {"": h}
    w = words_of(name)
    w = re.sub(r"^(is|use|enable|with|has|should) ", "", w)
    if truth:
        return {"": [f"with {w}", f"with the {w} on", f"{w} on", f"using {w}", f"with {w} enabled",
                     f"and turn on {w}"]}
    return {"": [f"without {w}", f"no {w}", f"{w} off", f"with the {w} off", f"with {w} disabled",
                 f"without the {w}"]}


def make_value(rng, name, schema, hint, context=""):
    """A Value for property `name` with JSON Schema `schema`, or None if it
    cannot be made (a schema this generator does not understand)."""
    hint = hint or {}
    if "const" in schema:
        c = schema["const"]
        return Value(c, {"": [words_of(str(c))]})
    if "enum" in schema:
        member = rng.choice(schema["enum"])
        return Value(member, enum_forms(member, hint))
    for key in ("anyOf", "oneOf"):
        if key in schema and schema[key]:
            return make_value(rng, name, rng.choice(schema[key]), hint, context)
    t = schema.get("type")
    if isinstance(t, list):
        t = next((x for x in t if x != "null"), None)
    if t == "boolean":
        truth = rng.random() < 0.6
        return Value(truth, bool_forms(name, truth, hint))
    if t in ("integer", "number"):
        lo = schema.get("minimum", schema.get("exclusiveMinimum", 0))
        hi = schema.get("maximum", schema.get("exclusiveMaximum", lo + 100))
        if "exclusiveMinimum" in schema and isinstance(schema["exclusiveMinimum"], (int, float)):
            lo = schema["exclusiveMinimum"] + 1
        if "exclusiveMaximum" in schema and isinstance(schema["exclusiveMaximum"], (int, float)):
            hi = schema["exclusiveMaximum"] - 1
        unit = duration_unit(name, schema) if t == "integer" else None
        if unit:
            for _ in range(50):
                secs = sample_seconds(rng)
                v = secs / unit
                if abs(v - round(v)) < 1e-9 and lo <= round(v) <= hi:
                    nouns, adjs = spoken_duration(rng, secs)
                    return Value(int(round(v)), {"": nouns, "adj": adjs})
        if t == "integer":
            lo, hi = int(lo), int(hi)
            if hi - lo > 1000 and rng.random() < 0.7:
                hi = lo + 1000
            v = rng.randint(lo, hi) if rng.random() < 0.7 else rng.choice(
                [x for x in (lo, hi, (lo + hi) // 2, lo + 1) if lo <= x <= hi])
            forms = [say_number(rng, v) for _ in range(3)]
            w = words_of(name) + " " + str(schema.get("description", "")).lower()
            if re.search(r"percent|volume|brightness|level|%", w) and 0 <= v <= 100:
                forms += [f"{v}%", f"{v} percent", f"{number_words(v)} percent"]
            return Value(v, {"": forms})
        v = round(rng.uniform(float(lo), float(hi)), rng.choice([0, 1, 1, 2]))
        if v == int(v) and rng.random() < 0.5:
            v = int(v)
        return Value(v, {"": [str(v)]})
    if t == "array":
        items = schema.get("items", {"type": "string"})
        k = rng.randint(max(1, schema.get("minItems", 1)), min(3, schema.get("maxItems", 3)))
        vals = [make_value(rng, name, items, hint, context) for _ in range(k)]
        if any(v is None for v in vals):
            return None
        said = [v.say(rng) for v in vals]
        joined = said[0] if k == 1 else ", ".join(said[:-1]) + " and " + said[-1]
        return Value([v.value for v in vals], {"": [joined]}, literal=all(v.literal for v in vals))
    if t == "object":
        # A nested object: its required properties (the optional ones too,
        # when none is required), said as "name value" pairs.
        sub = schema.get("properties") or {}
        keys = [k for k in sub if k in (schema.get("required") or [])] or list(sub)
        vals = {k: make_value(rng, k, sub[k], None, context) for k in keys}
        if not vals or any(v is None for v in vals.values()):
            return None
        said = ", ".join(f"{words_of(k)} {v.say(rng)}" for k, v in vals.items())
        return Value({k: v.value for k, v in vals.items()}, {"": [said]}, literal=True)
    # string (or no type given)
    pool = hint.get("pool") if isinstance(hint, dict) else None
    got = string_value(rng, name, schema, pool, context)
    if isinstance(got, tuple):
        return Value(got[0], {"": got[1]}, literal=len(got[1]) == 1)
    return Value(got, {"": [got]}, literal=True)


def generic_fragments(name, schema, context=""):
    """Phrases that add an optional argument to a request, {v} marking the value."""
    w = words_of(name)
    if "enum" in schema or "const" in schema:
        return ["{v}", f"{w} {{v}}", f"in {{v}} {w}" if len(w.split()) == 1 else "{v}", "using {v}"]
    t = schema.get("type")
    if t == "boolean":
        return ["{v}"]
    if t in ("integer", "number"):
        if duration_unit(name, schema):
            return ["for {v}"]
        return [f"{w} {{v}}", f"with {w} {{v}}", f"{w} set to {{v}}", f"at {w} {{v}}"]
    kind = string_kind(name, schema, context)
    return {
        "person": ["to {v}", "for {v}", "with {v}"],
        "place": ["to {v}", "in {v}", "at {v}"],
        "message": ["saying {v}", "that says {v}", ': "{v}"', "with the text {v}"],
        "label": ["called {v}", "named {v}", "labeled {v}", f"with the {w} {{v}}"],
        "query": ["for {v}", "about {v}"],
        "song": ["{v}", "by {v}"],
        "url": ["{v}", "at {v}"],
    }.get(kind, [f"{w} {{v}}", f"with {w} {{v}}", f"{w}: {{v}}"])


def generic_templates(tool):
    """Imperative phrasings from the tool's name and description alone."""
    parts = words_of(tool["name"]).split()
    props = list((tool["parameters"].get("properties") or {}).keys())
    required = set(tool["parameters"].get("required") or [])
    verb, obj = (parts[0], " ".join(parts[1:])) if parts else ("use", tool["name"])
    verbs = VERB_SYNONYMS.get(verb, [verb])
    out = []
    for v in verbs:
        if obj:
            out += [f"{v} the {obj}", f"{v} a {obj}", f"{v} {obj}"]
        else:
            out += [f"{v}"]
        for p in props:
            pw = words_of(p)
            if obj and (pw == obj or pw in obj.split() or obj in pw):
                out += [f"{v} {{{p}}}", f"{v} the {{{p}}} {obj}"]
            elif p in required and len(required) == 1 and not obj:
                out += [f"{v} {{{p}}}"]
    desc = tool["description"].strip().rstrip(".")
    if desc:
        d = desc[0].lower() + desc[1:]
        if not required:  # as it is only when it needs no argument
            out.append(d)
        for p in props:
            pw = words_of(p)
            for art in ("a ", "an ", "the ", "its ", "your "):
                if f"{art}{pw}" in d:
                    out.append(d.replace(f"{art}{pw}", "{" + p + "}", 1))
    return out


# ---------------------------------------------------------------------------
# Requests
# ---------------------------------------------------------------------------

PREFIXES = ["", "", "", "", "please ", "can you ", "could you ", "would you ", "could you please ",
            "can you please ", "can u ", "I want to ", "I'd like to ", "I need to ", "I need you to ",
            "hey, ", "hey assistant, ", "ok ", "okay, ", "um, ", "uh ", "quick, ", "go ahead and ",
            "help me ", "let's ", "pls ", "yo ", "I wanna ", "would you mind helping me ", "just ",
            "hi, can you ", "hey can you ", "ok so ", "alright, ", "right, ", "hmm, ", "so, ",
            "now ", "I'd love it if you could ", "be a dear and ", "real quick, "]
SUFFIXES = ["", "", "", "", " please", " for me", " now", " right now", " thanks", ", thank you",
            " asap", " real quick", " pls", ", thanks!", " if you can", ", cheers", " quickly",
            " when you get a chance", " thx"]
CONTEXTS = ["I'm in a hurry, ", "before I forget, ", "my hands are full, ", "while I'm at it, ",
            "sorry to bother you, ", "one more thing: ", "first thing, ", "as soon as possible, ",
            "I'm busy so ", "quick favor: ", "if it's not too much trouble, "]
QUESTION_PREFIXES = ("can", "could", "would", "hi, can", "hey can", "would you mind")
KEYBOARD = "qwertyuiop asdfghjkl zxcvbnm"


def typo(rng, word):
    if len(word) < 4 or not word.isalpha():
        return word
    i = rng.randint(1, len(word) - 2)
    r = rng.random()
    if r < 0.35:
        return word[:i] + word[i + 1] + word[i] + word[i + 2:]
    if r < 0.6:
        return word[:i] + word[i + 1:]
    if r < 0.8:
        return word[:i] + word[i] + word[i:]
    row = next((row for row in KEYBOARD.split() if word[i].lower() in row), None)
    if not row:
        return word
    j = row.index(word[i].lower())
    near = row[max(0, j - 1)] if j == len(row) - 1 or (j > 0 and rng.random() < 0.5) else row[j + 1]
    return word[:i] + near + word[i + 1:]


PLACEHOLDER = re.compile(r"\{([A-Za-z0-9_]+)(?::([A-Za-z0-9_]+))?\}")


class ToolPhrases:
    """Templates, fragments and values for one tool: the hints' and generic ones."""

    def __init__(self, tool, hints):
        self.tool = tool
        self.props = tool["parameters"].get("properties") or {}
        self.required = [p for p in (tool["parameters"].get("required") or []) if p in self.props]
        h = hints.get(tool["name"], {})
        self.values_hint = h.get("values", {})
        self.contexts = h.get("context", [])
        # (text, imperative, fixed {prop: value}, hinted)
        self.templates = []
        for key, imperative in (("do", True), ("say", False)):
            for t in h.get(key, []):
                if isinstance(t, dict):
                    self.templates.append((t["t"], imperative, t.get("set", {}), True))
                else:
                    self.templates.append((t, imperative, {}, True))
        self.hinted = bool(self.templates)
        for t in generic_templates(tool):
            self.templates.append((t, True, {}, False))
        self.context = words_of(tool["name"]) + " " + tool["description"]
        self.fragments = {p: h.get("fragments", {}).get(p) or generic_fragments(p, s, self.context)
                          for p, s in self.props.items()}

    def usable(self, chosen):
        """Templates whose placeholders and fixed values are all among the chosen arguments."""
        out = []
        for text, imp, fixed, hinted in self.templates:
            names = {m.group(1) for m in PLACEHOLDER.finditer(text)}
            if not names <= set(self.props) or not (names | set(fixed)) <= chosen:
                continue
            out.append((text, imp, fixed, names, hinted))
        return out


def fill(rng, text, values, lowercase_values, said):
    """Replaces {prop} and {prop:form} with a spoken form of the value; the
    forms of literal values (strings the call copies) are added to `said`."""
    def sub(m):
        v = values[m.group(1)]
        s = v.say(rng, m.group(2) or "")
        if v.literal:
            said.append(s)
            return s
        return s.lower() if lowercase_values else s
    return PLACEHOLDER.sub(sub, text)


def make_request(rng, phrases):
    """(request text, {prop: Value}) for one tool, or None when no phrasing fits."""
    props = phrases.props
    chosen = set(phrases.required)
    for p in props:
        if p not in chosen and rng.random() < 0.45:
            chosen.add(p)
    values = {}
    for p in [p for p in props if p in chosen]:  # schema order: sets iterate in hash order
        v = make_value(rng, p, props[p], phrases.values_hint.get(p), phrases.context)
        if v is None:
            if p in phrases.required:
                return None
            continue
        values[p] = v
    usable = phrases.usable(set(values))
    # Templates that name every required argument, when there are some; the
    # arguments a template leaves out are added as fragments.
    covering = [u for u in usable if set(phrases.required) <= (u[3] | set(u[2]))]
    usable = covering or usable
    if not usable:
        return None
    # Hand-written phrasings, when the hints have some that fit, 4 times in 5.
    hinted = [u for u in usable if u[4]]
    pool = hinted if hinted and rng.random() < 0.8 else usable
    text, imperative, fixed, names, _ = rng.choice(pool)
    for p, val in fixed.items():
        schema = props.get(p, {})
        forms = enum_forms(val, phrases.values_hint.get(p, {})) if "enum" in schema else {"": [str(val)]}
        values[p] = Value(val, forms)
    # Sometimes the person types names and places in lower case: the call copies them so.
    if rng.random() < 0.15:
        for v in values.values():
            if v.literal and isinstance(v.value, str):
                v.value = v.value.lower()
                v.forms = {"": [v.value]}
    lowercase_values = rng.random() < 0.25
    said = []
    fronted = False
    core = fill(rng, text, values, lowercase_values, said)
    # Arguments the template does not name go in as fragments, after or before it.
    for p in [p for p in props if p in values and p not in names and p not in fixed]:
        frag = rng.choice(phrases.fragments[p])
        piece = fill(rng, frag.replace("{v}", "{" + p + "}"), values, lowercase_values, said)
        if rng.random() < 0.85 or not imperative or piece.startswith((":", ",")):
            sep = "" if piece.startswith((":", ",")) else " "
            core = core + sep + piece
        else:
            core = piece + ", " + core
            fronted = True
    # Nothing may follow a copied string at the end ("...saying I'm late please").
    open_end = any(core.rstrip("\"'").endswith(s) for s in said)
    return dress(rng, core, imperative and not fronted, phrases.contexts, said, open_end), values


def dress(rng, core, imperative, contexts, said, open_end):
    """Politeness, fillers, context, casing, punctuation and the odd typo;
    the strings in `said` (copied into the call) are left as they are."""
    prefix = rng.choice(PREFIXES) if imperative else rng.choice(["", "", "", "hey, ", "ok ", "um, "])
    suffix = "" if open_end else rng.choice(SUFFIXES)
    if rng.random() < 0.12:
        prefix = rng.choice(CONTEXTS + contexts) + prefix
    if rng.random() < 0.06:
        prefix = ""
    text = prefix + core + suffix
    question = prefix.strip().lower().startswith(QUESTION_PREFIXES)
    r = rng.random()
    if question:
        end = "?" if r < 0.7 else ("" if r < 0.9 else ".")
    else:
        end = "" if r < 0.45 else ("." if r < 0.8 else "!")
    if text.endswith(("?", "!", ".", '"')):
        end = ""
    text = text + end
    r = rng.random()
    if r < 0.5 and not any(text.startswith(s) for s in said):
        text = text[:1].upper() + text[1:]
    elif r < 0.53 and not said:
        text = text.upper()
    # A typo in a word that is no part of an argument.
    if rng.random() < 0.08:
        words = text.split(" ")
        banned = " ".join(said).lower()
        idx = [i for i, w in enumerate(words) if len(w) >= 4 and w.isalpha() and w.lower() not in banned]
        if idx:
            i = rng.choice(idx)
            words[i] = typo(rng, words[i])
            text = " ".join(words)
    text = re.sub(r"\b([Aa]) ([aeiouAEIOU]\w)", r"\1n \2", text)  # "a event" -> "an event"
    return re.sub(r"[ \t]+", " ", text).strip()


# ---------------------------------------------------------------------------
# Requests no tool fits
# ---------------------------------------------------------------------------

NO_TOOL = [
    ("What is the capital of France?", "The capital of France is Paris."),
    ("What's the capital of Japan?", "The capital of Japan is Tokyo."),
    ("What is the capital of Italy?", "Rome is the capital of Italy."),
    ("Capital of Canada?", "The capital of Canada is Ottawa."),
    ("What's the capital of Australia?", "The capital of Australia is Canberra."),
    ("Who wrote Romeo and Juliet?", "William Shakespeare wrote Romeo and Juliet."),
    ("Who painted the Mona Lisa?", "Leonardo da Vinci painted the Mona Lisa."),
    ("Who was the first person on the moon?", "Neil Armstrong, in 1969."),
    ("How many days are in a leap year?", "A leap year has 366 days."),
    ("How many continents are there?", "There are seven continents."),
    ("What is 7 times 8?", "7 times 8 is 56."),
    ("What's 12 plus 30?", "12 plus 30 is 42."),
    ("what is 100 divided by 4", "100 divided by 4 is 25."),
    ("What is the square root of 81?", "The square root of 81 is 9."),
    ("How many legs does a spider have?", "A spider has eight legs."),
    ("What is the largest planet in our solar system?", "Jupiter is the largest planet in our solar system."),
    ("Which planet is closest to the sun?", "Mercury is the closest planet to the sun."),
    ("What is the boiling point of water?", "Water boils at 100 degrees Celsius at sea level."),
    ("What is H2O?", "H2O is the chemical formula for water."),
    ("What gas do plants take in?", "Plants take in carbon dioxide and release oxygen."),
    ("Why is the sky blue?", "Sunlight scatters off air molecules, and blue light scatters the most."),
    ("What is photosynthesis?", "Photosynthesis is how plants turn light, water and carbon dioxide into sugar and oxygen."),
    ("What does DNA stand for?", "DNA stands for deoxyribonucleic acid."),
    ("How many bones are in the human body?", "An adult human has 206 bones."),
    ("What is the speed of light?", "About 300,000 kilometers per second."),
    ("What is the longest river in the world?", "The Nile is usually called the longest river in the world."),
    ("What is the tallest mountain on Earth?", "Mount Everest is the tallest mountain above sea level."),
    ("What language is spoken in Brazil?", "Portuguese is the main language of Brazil."),
    ("How many minutes are in a day?", "There are 1,440 minutes in a day."),
    ("Who invented the telephone?", "Alexander Graham Bell is credited with inventing the telephone."),
    ("What year did World War II end?", "World War II ended in 1945."),
    ("What is the smallest prime number?", "The smallest prime number is 2."),
    ("Is a tomato a fruit?", "Yes, botanically a tomato is a fruit."),
    ("What is the freezing point of water in Fahrenheit?", "Water freezes at 32 degrees Fahrenheit."),
    ("How far is the moon?", "The moon is about 384,000 kilometers from Earth."),
    ("What's the chemical symbol for gold?", "The chemical symbol for gold is Au."),
    ("Who discovered penicillin?", "Alexander Fleming discovered penicillin in 1928."),
    ("What is the largest ocean?", "The Pacific is the largest ocean."),
    ("What is a haiku?", "A haiku is a short Japanese poem of three lines with 5, 7 and 5 syllables."),
    ("What does CPU stand for?", "CPU stands for central processing unit."),
    ("What's a synonym for happy?", "Joyful, cheerful or glad."),
    ("What is the opposite of ancient?", "Modern."),
    ("How do you spell necessary?", "N-E-C-E-S-S-A-R-Y."),
    ("What is the plural of mouse?", "The plural of mouse is mice."),
    ("Translate hello into Spanish.", "Hello in Spanish is \"hola\"."),
    ("How do you say thank you in French?", "Thank you in French is \"merci\"."),
    ("What does 'bonjour' mean?", "\"Bonjour\" means \"hello\" or \"good day\" in French."),
    ("Give me a fun fact.", "Octopuses have three hearts."),
    ("Tell me a joke.", "Why did the scarecrow win an award? Because he was outstanding in his field."),
    ("Tell me something interesting.", "Honey never spoils: edible honey has been found in ancient Egyptian tombs."),
    ("Write a haiku about autumn.", "Red leaves drift and fall,\ncool wind hums through empty trees,\nthe year breathes slowly."),
    ("Give me a word that rhymes with cat.", "Hat, bat or mat."),
    ("How do I boil an egg?", "Put the egg in boiling water for about 9 minutes, then cool it in cold water."),
    ("How do I make tea?", "Pour boiling water over a tea bag, steep for 3 to 5 minutes, then remove the bag."),
    ("How can I sleep better?", "Keep a regular schedule, avoid screens before bed and keep your room cool and dark."),
    ("How do I stay focused?", "Work in short blocks, remove distractions and take regular breaks."),
    ("Any tips for a job interview?", "Research the company, prepare examples of your work and arrive a little early."),
    ("How much water should I drink a day?", "Around 2 liters a day is a common guideline, more when it is hot."),
    ("What should I cook for dinner?", "How about a simple pasta with tomatoes, garlic and basil?"),
    ("Recommend a good book.", "Try \"The Little Prince\" by Antoine de Saint-Exupéry."),
    ("What's a good name for a dog?", "How about Max, Luna or Biscuit?"),
    ("Explain gravity simply.", "Gravity is the pull that masses have on each other; it keeps us on the ground."),
    ("What is machine learning?", "Machine learning is when computers learn patterns from data instead of following fixed rules."),
    ("What is an API?", "An API is a set of rules that lets programs talk to each other."),
    ("What is the internet?", "The internet is a global network of connected computers."),
    ("Define democracy.", "Democracy is a system of government where the people choose their leaders by voting."),
    ("What is inflation?", "Inflation is the general rise of prices over time."),
    ("Summarize the plot of Cinderella.", "A kind young woman, helped by her fairy godmother, goes to a ball and marries the prince."),
    ("Hi", "Hello! How can I help you?"),
    ("Hello!", "Hi there! What can I do for you?"),
    ("Hey there", "Hey! How can I help?"),
    ("Good morning", "Good morning! How can I help you today?"),
    ("How are you?", "I'm doing well, thanks for asking! How can I help?"),
    ("What's up?", "Not much! What can I do for you?"),
    ("Who are you?", "I'm a small assistant that runs on your device."),
    ("What's your name?", "I'm your on-device assistant."),
    ("What can you do?", "I can answer simple questions and use the tools this app gives me."),
    ("Are you a robot?", "I'm an AI assistant, a language model running on this device."),
    ("Thank you!", "You're welcome!"),
    ("Thanks a lot", "Happy to help!"),
    ("Bye", "Goodbye! Have a nice day."),
    ("Good night", "Good night, sleep well!"),
    ("I'm bored", "How about a walk, a puzzle or a new book?"),
    ("I'm tired", "Maybe it's time for a short break or some rest."),
    ("I'm hungry", "How about a snack, like some fruit or nuts?"),
    ("You're awesome", "Thank you, that's kind of you!"),
    ("Do you like pizza?", "I don't eat, but pizza is a very popular choice!"),
    ("What's the meaning of life?", "Many people find it in relationships, curiosity and helping others."),
    ("Can you keep a secret?", "I don't remember conversations, so your secret is safe."),
    ("Flip a coin.", "Heads!"),
    ("Pick a number between 1 and 10.", "7."),
    ("Is it better to rent or buy a house?", "It depends on how long you'll stay, prices where you live and your savings."),
    ("What's the difference between weather and climate?", "Weather is the short-term state of the air; climate is its long-term average."),
    ("How many players are on a soccer team?", "Eleven players per team are on the field."),
    ("Who won the first World Cup?", "Uruguay won the first FIFA World Cup in 1930."),
    ("What is the fastest land animal?", "The cheetah is the fastest land animal."),
    ("Why do cats purr?", "Cats purr when they are content, and sometimes to calm themselves."),
    ("What is a black hole?", "A black hole is a region of space where gravity is so strong that not even light escapes."),
    ("Order me a pizza.", "Sorry, I can't order food."),
    ("Book a flight to Rome.", "Sorry, I can't book flights."),
    ("Turn off the lights in the kitchen.", "Sorry, I can't control the lights."),
    ("Pay my electricity bill.", "Sorry, I can't make payments."),
    ("Buy me some new shoes.", "Sorry, I can't shop for you."),
    ("Reserve a table for two tonight.", "Sorry, I can't make reservations."),
    ("Lock the front door.", "Sorry, I can't control door locks."),
    ("Transfer 50 dollars to my savings.", "Sorry, I can't move money."),
    ("Order an Uber.", "Sorry, I can't order rides."),
    ("Turn up the heating.", "Sorry, I can't control the heating."),
    ("Delete all my emails.", "Sorry, I can't manage email."),
    ("Post this on Instagram.", "Sorry, I can't post on social media."),
    ("Start the dishwasher.", "Sorry, I can't control appliances."),
]

NO_TOOL_PREFIXES = ["", "", "", "", "hey, ", "quick question: ", "ok, ", "um, ", "so ", "hi! ",
                    "I was wondering, ", "random question, ", "tell me, "]


def tool_keywords(tools, hints):
    """Words that point at one of the tools: a no-tool request with them is dropped."""
    words = set()
    for t in tools:
        words.update(words_of(t["name"]).split()[1:] or words_of(t["name"]).split())
        for p, s in (t["parameters"].get("properties") or {}).items():
            words.update(words_of(p).split())
            for m in s.get("enum", []):
                if isinstance(m, str):
                    words.update(words_of(m).split())
                    for syn in ENUM_SYNONYMS.get(m.lower(), []):
                        words.update(syn.lower().split())
        for key, val in hints.get(t["name"], {}).items():
            if key == "keywords":
                words.update(w.lower() for w in val)
    return {w for w in words if w not in STOPWORDS and len(w) > 2}


def no_tool_pool(tools, hints):
    keys = tool_keywords(tools, hints)
    pool = []
    for q, a in NO_TOOL:
        words = set(re.findall(r"[a-z0-9]+", q.lower()))
        if not words & keys:
            pool.append((q, a))
    return pool


def dress_question(rng, q):
    prefix = rng.choice(NO_TOOL_PREFIXES)
    if prefix and rng.random() < 0.7:
        q = q[:1].lower() + q[1:]
    text = prefix + q
    r = rng.random()
    if r < 0.3:
        text = text.lower()
    if r > 0.85:
        text = text.rstrip("?.!")
    if rng.random() < 0.05:
        words = text.split(" ")
        i = rng.randrange(len(words))
        words[i] = typo(rng, words[i])
        text = " ".join(words)
    return text[:1].upper() + text[1:] if rng.random() < 0.6 else text


# ---------------------------------------------------------------------------


def build_examples(tools, hints, n, seed, no_tool_fraction=0.15, trigger=TRIGGER, conversion_weight=1):
    rng = random.Random(seed)
    phrases = []
    for t in tools:
        phrases.append(ToolPhrases(t, hints))
    # A tool whose arguments need a conversion (a duration said in minutes or
    # hours, stored in the schema's unit) is drawn conversion_weight times as
    # often (more with several): the arithmetic is what a small model learns last.
    weights = [1 + (conversion_weight - 1) * sum(1 for p, s in ph.props.items()
                                                 if s.get("type") == "integer" and duration_unit(p, s))
               for ph in phrases]
    system_plain = tools_system_prompt(tools)
    system_trigger = tools_system_prompt(tools, trigger)
    pool = no_tool_pool(tools, hints)
    out, seen = [], set()
    n_no_tool = int(round(n * no_tool_fraction)) if pool else 0
    attempts = 0
    while len(out) < n - n_no_tool and attempts < 50 * n:
        attempts += 1
        ph = rng.choices(phrases, weights)[0] if len(set(weights)) > 1 else rng.choice(phrases)
        got = make_request(rng, ph)
        if got is None:
            continue
        text, values = got
        args = {k: v.value for k, v in values.items()}
        variant = "plain" if len(out) % 2 == 0 else "trigger"
        key = (variant, text.lower())
        if key in seen:
            continue
        seen.add(key)
        call = call_json(ph.tool, args)
        answer = (call if variant == "plain" else trigger + call + TRIGGER_CLOSE) + IM_END
        out.append({"variant": variant, "system": system_plain if variant == "plain" else system_trigger,
                    "user": text, "answer": answer, "tool": ph.tool["name"],
                    "arguments": json.loads(call)["arguments"]})
    for i in range(n_no_tool):
        q, a = rng.choice(pool)
        out.append({"variant": "trigger", "system": system_trigger, "user": dress_question(rng, q),
                    "answer": a + IM_END, "tool": None, "arguments": None})
    rng.shuffle(out)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tools", nargs="+", required=True, help="tool files, in the order lilims gets them")
    ap.add_argument("--hints", help="per-tool phrase hints (JSON); optional")
    ap.add_argument("-n", type=int, default=4000, help="number of examples (default 4000)")
    ap.add_argument("--no-tool-fraction", type=float, default=0.15)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--conversion-weight", type=float, default=1,
                    help="draw a tool with a duration to convert this many times as often as the others "
                         "(default 1: all alike)")
    ap.add_argument("-o", "--out", required=True)
    ap.add_argument("--show", type=int, default=0, help="print this many examples")
    args = ap.parse_args()
    tools = load_tools(args.tools)
    hints = {}
    if args.hints:
        with open(args.hints, encoding="utf-8") as fh:
            hints = json.load(fh)
    examples = build_examples(tools, hints, args.n, args.seed, args.no_tool_fraction,
                              conversion_weight=args.conversion_weight)
    with open(args.out, "w", encoding="utf-8") as fh:
        for e in examples:
            fh.write(json.dumps(e, ensure_ascii=False) + "\n")
    by_tool = {}
    for e in examples:
        by_tool[e["tool"]] = by_tool.get(e["tool"], 0) + 1
    for t in tools:
        if t["name"] not in by_tool:
            print(f"generate: no request could be made for '{t['name']}' (a required argument whose "
                  "schema this generator does not understand)", file=sys.stderr)
    print(f"generate: {len(examples)} examples -> {args.out}; per tool: "
          + ", ".join(f"{k or '(none)'} {v}" for k, v in sorted(by_tool.items(), key=lambda kv: str(kv[0]))),
          file=sys.stderr)
    for e in examples[:args.show]:
        print(f"{e['variant']:8s} {e['user']!r} -> {e['answer']!r}")


if __name__ == "__main__":
    main()
