"""A seeded, synthetic set of long dated conversations with questions about stated facts.

Shaped like LongMemEval and LoCoMo, built from templates (no network, no model):
several users, each with many sessions spread over months ending just before today,
each session a run of ``user`` / ``assistant`` turns. Most turns are chit-chat on
varied topics (cooking, travel, code, TV, plants, money, ...). A few user turns state
personal facts ("My sister Ana lives in Porto.") in the early sessions; some of
those facts change in a later session ("Ana moved to Lisbon last week."). Every
fact is asked about "now" with a paraphrased question ("Which city is my sister
based in these days?"); the evidence is the turn that states it, or for a changed
fact the turn that states the change.

Retrieval is not trivial on purpose: the user's own entities (the sister's name,
the pet's name, the other cities, workplaces, books) recur in filler turns that do
not state the fact, and travel filler names the same cities.

The structure (who says what, in which session, how many days before the end) is a
function of the seed alone; the absolute dates are anchored to the day of the run
(sessions end one day before today, UTC), so "months later" stays true whenever the
benchmark runs against a wall-clock ``now``.
"""

from __future__ import annotations

import random
import re
import string
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

__all__ = ["Dataset", "Question", "Turn", "generate"]


@dataclass(frozen=True)
class Turn:
    id: str
    user: str
    session: str
    role: str  # "user" or "assistant"
    text: str
    at: datetime


@dataclass(frozen=True)
class Question:
    id: str
    user: str
    category: str
    text: str
    asked_at: datetime
    evidence: tuple[str, ...]  # turn ids that answer it (the newest statement)
    superseded: tuple[str, ...] = ()  # for a changed fact: the turn with the old value
    stated_at: datetime | None = None  # when the evidence turn was said

    @property
    def changed(self) -> bool:
        return bool(self.superseded)


@dataclass(frozen=True)
class Dataset:
    turns: list[Turn]
    questions: list[Question]
    end: datetime  # the questions are asked at this time ("now")


# -- slot values -------------------------------------------------------------------------

FEMALE = [
    "Ana",
    "Carla",
    "Elena",
    "Greta",
    "Ines",
    "Keiko",
    "Maya",
    "Olga",
    "Rosa",
    "Tara",
    "Vera",
    "Ximena",
    "Zoe",
    "Bianca",
    "Dana",
    "Fiona",
    "Hana",
    "Jade",
    "Lena",
    "Nadia",
    "Priya",
    "Sofia",
    "Uma",
    "Wanda",
    "Yara",
]
MALE = [
    "Ben",
    "Dev",
    "Farid",
    "Hugo",
    "Jonas",
    "Liam",
    "Nico",
    "Pedro",
    "Sami",
    "Umar",
    "Wes",
    "Yusuf",
    "Amir",
    "Chidi",
    "Emil",
    "Gus",
    "Ivan",
    "Kofi",
    "Marco",
    "Omar",
    "Rafael",
    "Tomas",
    "Victor",
    "Zain",
    "Quinn",
]
CITIES = [
    "Porto",
    "Lisbon",
    "Madrid",
    "Berlin",
    "Dublin",
    "Edinburgh",
    "Lyon",
    "Vienna",
    "Prague",
    "Krakow",
    "Oslo",
    "Bergen",
    "Seattle",
    "Denver",
    "Austin",
    "Chicago",
    "Toronto",
    "Montreal",
    "Vancouver",
    "Melbourne",
    "Auckland",
    "Osaka",
    "Kyoto",
    "Seoul",
    "Barcelona",
    "Valencia",
    "Milan",
    "Naples",
    "Athens",
    "Copenhagen",
]
# Relation and the gender of the names it takes ("" for either).
RELATIVES = [
    ("sister", "f"),
    ("brother", "m"),
    ("cousin", ""),
    ("aunt", "f"),
    ("uncle", "m"),
    ("best friend", ""),
    ("grandmother", "f"),
]
WORKPLACES = [
    "bakery",
    "dental clinic",
    "bike shop",
    "public library",
    "logistics company",
    "hotel",
    "architecture firm",
    "bookstore",
    "animal shelter",
    "software startup",
    "hospital",
    "primary school",
    "coffee roastery",
    "law firm",
    "garden centre",
]
ANIMALS = [
    "beagle",
    "tabby cat",
    "rescue greyhound",
    "rabbit",
    "border collie",
    "parrot",
    "pair of guinea pigs",
    "corgi",
    "black cat",
    "bearded dragon",
]
PET_NAMES = [
    "Biscuit",
    "Pepper",
    "Mochi",
    "Olive",
    "Ziggy",
    "Noodle",
    "Bruno",
    "Luna",
    "Pickles",
    "Tofu",
    "Waffles",
    "Juno",
]
CARS = [
    "2012 Honda Civic",
    "Toyota Corolla",
    "Ford Fiesta",
    "Subaru Outback",
    "VW Golf",
    "Mazda 3",
    "Tesla Model 3",
    "Kia Niro",
    "Volvo V60",
    "Nissan Leaf",
    "Skoda Octavia",
    "Fiat 500",
]
ACTIVITIES = [
    "pottery",
    "salsa",
    "rock climbing",
    "piano",
    "yoga",
    "boxing",
    "watercolour painting",
    "swimming",
    "chess club",
    "improv theatre",
    "woodworking",
    "choir",
]
COFFEES = [
    "oat milk flat white",
    "double espresso",
    "iced vanilla latte",
    "black filter coffee",
    "cappuccino with extra foam",
    "chai latte",
    "decaf americano",
    "cortado",
]
STREETS = [
    "Maple Street",
    "Elm Avenue",
    "Station Road",
    "Harbour Lane",
    "Rua das Flores",
    "Kings Road",
    "Willow Close",
    "Church Street",
    "Mill Lane",
    "Park Terrace",
    "Bridge Street",
    "Orchard Way",
]
LANGUAGES = ["Spanish", "Japanese", "Italian", "Korean", "German", "Portuguese", "Dutch", "Greek"]
MEDS = [
    ("lisinopril", "blood pressure"),
    ("metformin", "blood sugar"),
    ("levothyroxine", "thyroid"),
    ("sertraline", "anxiety"),
    ("atorvastatin", "cholesterol"),
    ("montelukast", "asthma"),
]
BOOKS = [
    ("The Remains of the Day", "Kazuo Ishiguro"),
    ("Pachinko", "Min Jin Lee"),
    ("Project Hail Mary", "Andy Weir"),
    ("Middlemarch", "George Eliot"),
    ("The Overstory", "Richard Powers"),
    ("Piranesi", "Susanna Clarke"),
    ("Educated", "Tara Westover"),
    ("The Left Hand of Darkness", "Ursula K. Le Guin"),
    ("Station Eleven", "Emily St. John Mandel"),
    ("A Gentleman in Moscow", "Amor Towles"),
]
ALLERGENS = {
    "shellfish": "The new seafood place downtown has a huge shrimp and lobster menu.",
    "peanuts": "Someone at the office brought peanut butter cookies again.",
    "penicillin": "The pharmacy mixed up someone's antibiotics prescription, what a mess.",
    "cats": "My neighbour's cat keeps sitting on our windowsill.",
    "bee stings": "There's a huge bee nest near the playground, they're removing it.",
    "latex": "We're buying balloons for the party, the cheap latex ones.",
    "sesame": "I found a bakery that does amazing sesame bagels.",
    "strawberries": "The strawberry picking farm opens next month, the kids love it.",
    "tree nuts": "My coworker is on a walnut and almond snack diet now.",
}
DIETS = ["vegetarian", "vegan", "pescatarian", "gluten-free", "dairy-free", "low-carb"]
MONTHS = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
]
CHILDREN = [("daughter", "f"), ("son", "m")]


# -- facts --------------------------------------------------------------------------------


class _Names:
    """A user's people: distinct first names drawn on demand, by gender."""

    def __init__(self, rng: random.Random) -> None:
        self._rng = rng
        self._pools = {"f": rng.sample(FEMALE, 5), "m": rng.sample(MALE, 5)}

    def pop(self, gender: str = "") -> str:
        return self._pools[gender or self._rng.choice("fm")].pop()


@dataclass(frozen=True)
class Category:
    """One kind of personal fact: how it is said, asked, changed and echoed."""

    name: str
    draw: Callable[[random.Random, _Names], dict[str, str]]
    state: tuple[str, ...]
    ask: tuple[str, ...]
    change: tuple[str, ...] = ()
    # Filler turns about the same entities that do not state the fact.
    echo: tuple[str, ...] = ()


def _two(rng: random.Random, pool: Sequence[str]) -> tuple[str, str]:
    a, b = rng.sample(list(pool), 2)
    return a, b


def _relative(rng: random.Random, names: _Names) -> dict[str, str]:
    city, city2 = _two(rng, CITIES)
    rel, gender = rng.choice(RELATIVES)
    return {"rel": rel, "name": names.pop(gender), "city": city, "city2": city2}


def _job(rng: random.Random, names: _Names) -> dict[str, str]:
    w, w2 = _two(rng, WORKPLACES)
    return {"w": w, "w2": w2}


def _pet(rng: random.Random, names: _Names) -> dict[str, str]:
    return {"animal": rng.choice(ANIMALS), "pet": rng.choice(PET_NAMES)}


def _car(rng: random.Random, names: _Names) -> dict[str, str]:
    car, car2 = _two(rng, CARS)
    return {"car": car, "car2": car2}


def _activity(rng: random.Random, names: _Names) -> dict[str, str]:
    a, a2 = _two(rng, ACTIVITIES)
    return {"act": a, "act2": a2, "day": rng.choice(["Monday", "Tuesday", "Wednesday"])}


def _child(rng: random.Random, names: _Names) -> dict[str, str]:
    age = rng.randint(4, 11)
    child, gender = rng.choice(CHILDREN)
    return {
        "child": child,
        "kname": names.pop(gender),
        "age": str(age),
        "age2": str(age + 1),
    }


def _partner(rng: random.Random, names: _Names) -> dict[str, str]:
    return {"p": names.pop(), "date": f"{rng.choice(MONTHS)} {rng.randint(1, 28)}"}


def _coffee(rng: random.Random, names: _Names) -> dict[str, str]:
    c, c2 = _two(rng, COFFEES)
    return {"c": c, "c2": c2}


def _street(rng: random.Random, names: _Names) -> dict[str, str]:
    s, s2 = _two(rng, STREETS)
    return {"s": s, "s2": s2}


def _language(rng: random.Random, names: _Names) -> dict[str, str]:
    lang, lang2 = _two(rng, LANGUAGES)
    return {"l": lang, "l2": lang2}


def _medication(rng: random.Random, names: _Names) -> dict[str, str]:
    med, cond = rng.choice(MEDS)
    return {"med": med, "cond": cond}


def _race(rng: random.Random, names: _Names) -> dict[str, str]:
    return {"rcity": rng.choice(CITIES), "month": rng.choice(MONTHS)}


def _book(rng: random.Random, names: _Names) -> dict[str, str]:
    (b, a), (b2, a2) = rng.sample(BOOKS, 2)
    return {"book": b, "author": a, "book2": b2, "author2": a2}


def _allergy(rng: random.Random, names: _Names) -> dict[str, str]:
    a = rng.choice(list(ALLERGENS))
    return {"a": a, "a_echo": ALLERGENS[a]}


def _diet(rng: random.Random, names: _Names) -> dict[str, str]:
    d, d2 = _two(rng, DIETS)
    return {"d": d, "d2": d2}


CATEGORIES: tuple[Category, ...] = (
    Category(
        "relative_city",
        _relative,
        state=(
            "My {rel} {name} lives in {city}, so I only get to see them a couple of times a year.",
            "{name}, my {rel}, has been living in {city} for a few years now.",
            "My {rel} {name} is settled in {city} and really loves it there.",
        ),
        ask=(
            "Where does my {rel} live?",
            "Which city is {name} based in these days?",
            "If I wanted to visit my {rel}, where would I have to travel to?",
        ),
        change=(
            "Big news: {name} moved to {city2} last week!",
            "My {rel} just relocated to {city2} for work, so no more weekends in {city}.",
            "{name} finally left {city}; the new place is in {city2}.",
        ),
        echo=(
            "My {rel} {name} sent me the funniest meme this morning.",
            "I should call {name} this weekend, it's been a while.",
            "{name} recommended a true crime podcast, have you heard of it?",
            "Is it true that {city} has a great food scene?",
            "Flights to {city2} are so expensive in the summer.",
            "{name} says hi, by the way. We had a long video call yesterday.",
        ),
    ),
    Category(
        "job",
        _job,
        state=(
            "I started a new job at a {w} this week!",
            "Guess what, I got hired at a {w}. First day was Monday.",
            "I'm working at a {w} now, there's a lot to learn.",
        ),
        ask=(
            "Where do I work these days?",
            "What kind of place is my current employer?",
            "What's my job at the moment?",
        ),
        change=(
            "I handed in my notice at the {w}; I start at a {w2} on Monday.",
            "New chapter: I left the {w} and now I work at a {w2}.",
            "I switched jobs, I'm at a {w2} now instead of the {w}.",
        ),
        echo=(
            "Work was exhausting today, so many meetings.",
            "My manager wants everyone to do overtime this month.",
            "A friend of mine is thinking of opening a {w}.",
            "Walked past a {w2} on the way home, it looked busy.",
            "Payday can't come soon enough.",
        ),
    ),
    Category(
        "pet",
        _pet,
        state=(
            "We adopted a {animal} called {pet} from the shelter!",
            "Meet {pet}, our new {animal}. We brought them home yesterday.",
            "I finally got a pet: a {animal} named {pet}.",
        ),
        ask=(
            "What kind of animal did I adopt?",
            "What sort of pet do I have at home?",
        ),
        echo=(
            "{pet} knocked a glass off the table again.",
            "Took {pet} to the vet for a checkup, all good.",
            "{pet} has been sleeping on my laptop bag all afternoon.",
            "Do you know a good brand of pet food that isn't too pricey?",
        ),
    ),
    Category(
        "car",
        _car,
        state=(
            "I finally bought a car, a used {car}.",
            "Picked up my {car} from the dealer today, so happy.",
            "We're now the proud owners of a {car}.",
        ),
        ask=(
            "What car do I drive?",
            "Which vehicle do I own right now?",
            "What's the make and model of my car?",
        ),
        change=(
            "Sold the {car} and bought a {car2} instead.",
            "I traded in the {car}; I drive a {car2} now.",
            "Said goodbye to the old {car} today. The {car2} is parked outside!",
        ),
        echo=(
            "Traffic on the ring road was terrible this morning.",
            "Fuel prices are up again.",
            "My coworker just got a {car2}, it looks nice.",
            "I need to book an MOT and an oil change soon.",
        ),
    ),
    Category(
        "activity",
        _activity,
        state=(
            "I signed up for {act} classes on {day} evenings.",
            "I've started going to {act} every {day} after work.",
            "New hobby alert: {act}, once a week on {day}s.",
        ),
        ask=(
            "What weekly class am I taking?",
            "Which activity did I sign up for after work?",
            "What hobby do I do every week?",
        ),
        change=(
            "I quit {act}, it wasn't for me. I've joined {act2} instead.",
            "Switched from {act} to {act2} on my {day} evenings.",
            "No more {act}: I'm doing {act2} now and I love it.",
        ),
        echo=(
            "I watched a video about {act} and it looked fun.",
            "A friend asked me to join a {act2} workshop sometime.",
            "{day} was a long day.",
            "I need more hobbies that don't involve screens.",
        ),
    ),
    Category(
        "child_age",
        _child,
        state=(
            "My {child} {kname} just turned {age}.",
            "{kname}, my {child}, is {age} years old now and full of energy.",
            "We had {kname}'s party on Saturday, {age} candles on the cake.",
        ),
        ask=(
            "How old is my {child}?",
            "What age is {kname} now?",
        ),
        change=(
            "We celebrated {kname}'s birthday yesterday, {age2} already!",
            "Can't believe my {child} is {age2} now, the party was chaos.",
        ),
        echo=(
            "{kname} has a school trip next week.",
            "I need to pack lunch for {kname} tomorrow.",
            "{kname} wants a bike for Christmas.",
            "Parents' evening at {kname}'s school was long.",
        ),
    ),
    Category(
        "partner_birthday",
        _partner,
        state=(
            "My partner {p}'s birthday is on {date}, I never want to forget it.",
            "Note to self: {p}'s birthday is {date}.",
            "{p} was born on {date}, remind me to plan something.",
        ),
        ask=(
            "When is my partner's birthday?",
            "What date should I plan a celebration for {p}?",
        ),
        echo=(
            "{p} and I tried a new restaurant last night.",
            "{p} is away on a work trip this week.",
            "I'm thinking of a surprise weekend away for {p}.",
            "{p} says I spend too much time on my phone.",
        ),
    ),
    Category(
        "coffee",
        _coffee,
        state=(
            "My usual coffee order is a {c}.",
            "I always get a {c} from the café near the office.",
        ),
        ask=(
            "What do I usually order at the coffee shop?",
            "How do I take my coffee?",
        ),
        change=(
            "I've switched my usual order to a {c2}, trying to cut back.",
            "No more {c} for me, it's a {c2} every morning now.",
        ),
        echo=(
            "The café near the office changed its opening hours.",
            "I drink way too much coffee during deadlines.",
            "Tried a new tea blend today, it was fine.",
        ),
    ),
    Category(
        "street",
        _street,
        state=(
            "We live in a small flat on {s}.",
            "Our apartment is on {s}, third floor, no lift.",
        ),
        ask=(
            "What street do I live on?",
            "Where is my home, which street?",
        ),
        change=(
            "We finally moved! Our new place is on {s2}.",
            "Moving day is done, we're on {s2} now.",
        ),
        echo=(
            "There's roadwork on {s} all week, so noisy.",
            "The neighbours are renovating again.",
            "Saw a nice house for sale on {s2}.",
        ),
    ),
    Category(
        "language",
        _language,
        state=(
            "I'm learning {l} with an app, fifteen minutes every morning.",
            "I started {l} lessons online, the grammar is tough.",
        ),
        ask=(
            "Which language am I studying?",
            "What language have I been practising?",
        ),
        change=(
            "I gave up on {l}; I'm studying {l2} now.",
            "Swapped my {l} course for {l2}, it clicks better.",
        ),
        echo=(
            "I watched a {l2} film with subtitles last night.",
            "My coworker speaks {l} fluently, so jealous.",
            "Language apps keep sending me guilt-trip notifications.",
        ),
    ),
    Category(
        "medication",
        _medication,
        state=(
            "My doctor put me on {med} for my {cond}.",
            "Started taking {med} every day for {cond}.",
        ),
        ask=(
            "What medication was I prescribed?",
            "Which pill do I take daily?",
        ),
        echo=(
            "I have a checkup with my doctor next month.",
            "The pharmacy queue was ridiculous today.",
            "Read an article about {cond} and diet.",
        ),
    ),
    Category(
        "race",
        _race,
        state=(
            "I'm training for the {rcity} half marathon in {month}.",
            "Signed up for the {rcity} half marathon this {month}, eek.",
        ),
        ask=(
            "What race am I training for?",
            "Which running event am I preparing for?",
        ),
        echo=(
            "Did a 10k this morning, legs are sore.",
            "My running shoes are falling apart.",
            "Any tips for running in the rain?",
        ),
    ),
    Category(
        "book",
        _book,
        state=(
            "I'm reading {book} by {author} at the moment.",
            "Just started {book}, can't put it down.",
        ),
        ask=(
            "What book am I reading right now?",
            "What's currently on my nightstand?",
        ),
        change=(
            "Finished {book}; now I'm on {book2}.",
            "Started {book2} last night after finishing {book}.",
        ),
        echo=(
            "The library has a book sale this weekend.",
            "My book club picked {book2} for next month.",
            "I fell asleep reading again.",
        ),
    ),
    Category(
        "allergy",
        _allergy,
        state=(
            "Just so you know, I'm allergic to {a}.",
            "I found out I have a {a} allergy, so I have to be careful.",
            "I can't go near {a}, I'm allergic. Learned that the hard way.",
        ),
        ask=(
            "What am I allergic to?",
            "Is there anything I need to avoid for medical reasons?",
        ),
        echo=("{a_echo}", "Spring is rough, everyone at work is sneezing."),
    ),
    Category(
        "diet",
        _diet,
        state=(
            "I've gone {d} since the new year.",
            "I'm eating {d} now, it's been a few weeks.",
        ),
        ask=(
            "What kind of diet do I follow?",
            "Are there foods I don't eat by choice?",
        ),
        change=(
            "I stopped being {d}; I'm {d2} now.",
            "Change of plan on food: {d2} from now on, not {d}.",
        ),
        echo=(
            "Made a big pasta dinner last night.",
            "Grocery prices are crazy at the moment.",
            "Found a great {d2} cookbook at the library.",
        ),
    ),
)

ACKS = (
    "Thanks for telling me, I'll keep that in mind.",
    "Good to know! Is there anything you'd like help with today?",
    "That sounds like a big change. How are you feeling about it?",
    "Noted. Anything else on your mind?",
    "Oh nice, thanks for sharing that with me.",
    "Got it. Let me know if that changes anything you need from me.",
    "That's great to hear!",
    "Thanks for the update.",
    "Good to know, I'll remember that.",
    "Thanks for letting me know. How's everything else going?",
)

# Replies to the filler turns that mention the user's own people and things.
REACTIONS = (
    "Ha, that sounds about right.",
    "Oh no, hopefully it gets better soon.",
    "That's relatable.",
    "Sounds like a busy week!",
    "Fair enough. Anything I can help with?",
    "Oh, fun! Tell me more if you like.",
    "That's a lot to deal with at once.",
    "Nice, that made me smile.",
    "Hmm, that's annoying. Want some ideas?",
    "I hear you.",
    "Well, that's one way to start the day.",
    "Sounds lovely, honestly.",
)

USER_OPENERS = (
    "Hey! ",
    "Quick question. ",
    "Ok, random thing. ",
    "Ugh. ",
    "So. ",
    "Morning! ",
    "Hi again. ",
    "Right, next thing. ",
    "Bit of a weird one. ",
)
USER_CLOSERS = (
    " Anyway.",
    " lol",
    " Just saying.",
    " It's been on my mind.",
    " 🙃",
    " Typical.",
    " Ha.",
)
ASSISTANT_OPENERS = (
    "Sure thing. ",
    "Ah, I see. ",
    "Okay! ",
    "Right. ",
)
QUESTION_OPENERS = (
    "Good question! ",
    "Happy to help. ",
    "Hmm, let me think. ",
    "Great question. ",
)
ASSISTANT_CLOSERS = (
    " Hope that helps!",
    " Want me to suggest a few more?",
    " Let me know how it goes.",
    " Anything else?",
    " Happy to go into more detail.",
    " Does that sound doable?",
)


# -- filler -------------------------------------------------------------------------------

# fmt: off
FILL: dict[str, list[str]] = {
    "ingredient": [
        "chickpeas", "spinach", "leftover rice", "sweet potatoes", "tofu", "mushrooms",
        "a tin of tomatoes", "lentils", "feta", "eggs", "courgettes", "chicken thighs",
        "halloumi", "broccoli", "black beans", "aubergine", "coconut milk", "gnocchi",
        "frozen peas", "salmon fillets", "cabbage", "puff pastry", "ricotta", "leeks",
    ],
    "dish": [
        "a curry", "risotto", "shakshuka", "a stir-fry", "banana bread", "lasagne",
        "a frittata", "ramen", "a tray bake", "chilli", "dal", "fish tacos", "pancakes",
        "minestrone", "a pie", "focaccia", "pad thai", "a tagine", "fried rice", "gazpacho",
        "a quiche", "meatballs", "a noodle soup", "a traybake pizza",
    ],
    "texture": [
        "soggy", "too dry", "bland", "burnt on the bottom", "gluey", "undercooked",
        "way too salty", "rubbery", "greasy", "flat",
    ],
    "minutes": ["15", "20", "25", "30", "40", "45"],
    "vegetable": [
        "carrots", "cauliflower", "parsnips", "peppers", "Brussels sprouts", "potatoes",
        "beetroot", "squash", "fennel", "red onions",
    ],
    "weather": [
        "rainy", "windy", "grey", "freezing", "really humid", "scorching hot", "foggy",
        "stormy", "drizzly", "weirdly warm",
    ],
    "outing": [
        "farmers market", "botanical garden", "beach", "flea market", "lake", "zoo",
        "open-air cinema", "food festival", "castle ruins", "street fair", "vineyard",
    ],
    "indoor": [
        "science museum", "climbing gym", "bowling alley", "art gallery", "aquarium",
        "escape room", "board game café", "cinema", "indoor pool",
    ],
    "day": ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"],
    "show": [
        "Severance", "The Bear", "Slow Horses", "Succession", "Shogun",
        "Only Murders in the Building", "Ted Lasso", "The Crown", "Dark", "Fleabag", "Andor",
        "Abbott Elementary", "Blue Eye Samurai", "The Last of Us", "Bluey", "Reservation Dogs",
        "Mr Robot", "Line of Duty", "Derry Girls", "Arcane",
    ],
    "genre": [
        "horror", "romantic comedy", "heist", "sci-fi", "documentary", "animated", "noir",
        "western", "courtroom drama", "disaster",
    ],
    "movie": [
        "Arrival", "Paddington 2", "Knives Out", "Spirited Away", "Heat", "Moonlight",
        "Past Lives", "The Grand Budapest Hotel", "Parasite", "Inside Out", "Alien",
        "Amélie", "Mad Max: Fury Road", "Hot Fuzz", "Before Sunrise", "Coco",
    ],
    "n": ["1", "2", "3", "4", "5"],
    "error": [
        "KeyError", "TypeError", "segfault", "timeout", "null pointer exception",
        "import error", "permission denied error", "out of memory error", "404",
        "merge conflict", "syntax error",
    ],
    "lang": ["Python", "JavaScript", "Rust", "Go", "Java", "TypeScript", "SQL", "Kotlin", "C#"],
    "dest": CITIES,
    "month": MONTHS,
    "workout": [
        "spin class", "a HIIT session", "leg day", "a 5k run", "interval training", "pilates",
        "a long bike ride", "kettlebells", "a rowing session", "a stair workout",
    ],
    "bodypart": [
        "lower back", "left knee", "shoulder", "calves", "neck", "wrist", "hamstrings",
        "right ankle",
    ],
    "steps": ["6,000", "8,000", "10,000", "12,000"],
    "plant": [
        "monstera", "fiddle leaf fig", "snake plant", "pothos", "orchid", "peace lily",
        "basil", "rubber plant", "spider plant", "aloe vera", "calathea", "tomato plant",
    ],
    "herb": ["mint", "rosemary", "coriander", "chives", "thyme", "parsley", "dill", "oregano"],
    "amount": [
        "2,000", "5,000", "a thousand", "three months of rent", "enough for a holiday",
        "500 a month",
    ],
    "gadget": [
        "robot vacuum", "air fryer", "standing desk", "e-reader", "noise-cancelling headphones",
        "smart watch", "espresso machine", "tablet", "laptop", "bread maker", "projector",
    ],
    "purchase": [
        "takeaway", "clothes", "concert tickets", "subscriptions", "plants", "video games",
        "taxis", "coffee out", "books", "gadgets",
    ],
    "band": [
        "Radiohead", "Fleetwood Mac", "Khruangbin", "Taylor Swift", "Arctic Monkeys",
        "Bon Iver", "Daft Punk", "Phoebe Bridgers", "Tame Impala", "ABBA", "Beyoncé",
        "The National", "Little Simz", "Stevie Wonder", "Fontaines D.C.", "Björk",
    ],
    "mood": [
        "studying", "a long drive", "cleaning the flat", "a dinner party", "a rainy Sunday",
        "a morning run", "focusing at work", "falling asleep",
    ],
    "fixture": [
        "tap", "shower head", "radiator", "toilet", "dishwasher", "window", "boiler",
        "washing machine", "door hinge", "fridge",
    ],
    "room": ["kitchen", "bathroom", "bedroom", "hallway", "living room", "spare room", "loft"],
    "colour": [
        "sage green", "warm white", "navy blue", "terracotta", "pale yellow", "charcoal",
        "dusty pink", "olive",
    ],
    "colleague": [
        "Priscilla", "Mateo", "Joanne", "Raj", "Sven", "Beatriz", "Tom from finance",
        "the new intern", "my team lead", "Henrik", "Deborah", "Kenji",
    ],
    "project": [
        "Q3 budget", "website redesign", "onboarding", "migration", "annual review", "client",
        "warehouse", "pricing", "hiring", "launch",
    ],
    "friend": [
        "Mia", "Oscar", "Leo", "Harriet", "Kwame", "Aisha", "Jules", "Felix", "Noor", "Declan",
        "Saoirse", "Mateus",
    ],
    "interest": [
        "board games", "baking", "hiking", "photography", "vinyl records", "astronomy",
        "knitting", "cycling", "comics", "camping",
    ],
    "gift": [
        "a nice notebook", "a voucher", "a book", "a plant", "a good bottle of olive oil",
        "a candle", "a class or workshop", "concert tickets",
    ],
    "game": [
        "Catan", "Stardew Valley", "Wingspan", "Zelda", "chess", "Ticket to Ride",
        "Baldur's Gate 3", "Tetris", "Codenames", "Mario Kart", "Hades", "Carcassonne",
    ],
    "time": ["2 pm", "4 pm", "lunchtime", "mid-afternoon", "6 pm", "noon"],
    "news": [
        "the new phone launch", "the rail strike", "the heatwave warnings",
        "the election debate", "the solar eclipse", "the housing report",
        "the interest rate decision", "the bridge closure", "the Mars mission",
    ],
    "hours": ["five", "six", "seven", "four and a half"],
    "transport": ["bus", "train", "tram", "ferry", "metro"],
    "holiday": ["Christmas", "Easter", "the summer holidays", "New Year", "the long weekend"],
    "subject": ["photography", "statistics", "Excel", "public speaking", "drawing", "first aid"],
}
# fmt: on

# fmt: off
# Per topic, user lines each with the assistant replies that fit it; an exchange draws
# one pair, the two sharing their slot values.
TOPICS: dict[str, tuple[tuple[str, tuple[str, ...]], ...]] = {
    "cooking": (
        ("Any idea what I could make with {ingredient} and {ingredient}?", (
            "You could try {dish}; both would work in it.",
            "Those two go well in {dish}, or tossed through pasta.",
        )),
        ("I tried making {dish} last night and it came out {texture}.", (
            "If it turns out {texture}, try lower heat and a bit more time.",
            "That happens! Next time check the recipe's liquid amounts; it's usually that.",
        )),
        ("What's a quick dinner I can cook in {minutes} minutes?", (
            "{dish} can be done in about {minutes} minutes if you prep while the pan heats.",
            "A stir-fry with {ingredient} fits easily in {minutes} minutes.",
        )),
        ("How long should I roast {vegetable} for?", (
            "Roasting {vegetable} at 200°C for about {minutes} minutes usually works.",
        )),
        ("I want to meal prep for the week, maybe {dish}?", (
            "{dish} keeps well in the fridge for three or four days, so it's good for meal prep.",
        )),
        ("My {dish} always ends up {texture}, what am I doing wrong?", (
            "Usually it's the heat: try it a bit lower and give it more time.",
            "A squeeze of lemon and a pinch of salt at the end can rescue {dish} a lot.",
        )),
        ("Is it ok to freeze {dish}?", (
            "Yes, most versions of {dish} freeze well for a couple of months.",
        )),
        ("I have {ingredient} that needs using up today.", (
            "{ingredient} works in a lot of things: soups, omelettes, pasta.",
        )),
        ("Having friends over on {day}, thinking of doing {dish}.", (
            "{dish} is a good crowd pleaser, and you can make most of it ahead.",
        )),
        ("What goes well with {dish} as a side?", (
            "Roasted {vegetable} or a simple green salad would go nicely with {dish}.",
        )),
    ),
    "weekend": (
        ("It's been {weather} all week here.", (
            "A {weather} week can be draining; maybe plan something indoors like the {indoor}.",
        )),
        ("Any ideas for the weekend if it stays {weather}?", (
            "You could check out the {indoor}, a good option when it's {weather}.",
            "A film and a long lunch is a good plan for a {weather} weekend.",
        )),
        ("I'm thinking of going to the {outing} on {day}.", (
            "The {outing} sounds lovely if the weather holds.",
            "Going early to the {outing} avoids the crowds.",
        )),
        ("The forecast says {weather} again on {day}, ugh.", (
            "Maybe keep a backup plan like the {indoor} just in case.",
        )),
        ("What's something fun to do on a {weather} {day}?", (
            "How about the {indoor}? Then something warm to eat after.",
        )),
        ("We ended up at the {indoor} because it was {weather}.", (
            "Good call! The {indoor} is a great rainy-day option.",
        )),
        ("Is the {outing} worth it with kids?", (
            "Usually yes; go early and bring snacks.",
        )),
    ),
    "tv": (
        ("I just finished {show}, what should I watch next?", (
            "If you liked {show}, you might enjoy {movie} too.",
            "Maybe something different in tone, like a {genre} film: {movie} is a good one.",
        )),
        ("Have you seen {show}? The end of season {n} was wild.", (
            "Season {n} of {show} gets talked about a lot for that ending.",
        )),
        ("I'm in the mood for a {genre} movie tonight.", (
            "For a {genre} night, {movie} is a solid pick.",
        )),
        ("Can you recommend something like {show} but lighter?", (
            "{movie} is lighter but has some of the same charm.",
        )),
        ("Rewatching {movie} for the third time, no regrets.", (
            "{movie} holds up really well on a rewatch.",
        )),
        ("Is {show} worth starting? Everyone keeps talking about it.", (
            "{show} takes a couple of episodes to get going, but most people stick with it.",
        )),
        ("Fell asleep halfway through {movie} again.", (
            "Ha, maybe start it earlier next time!",
        )),
    ),
    "coding": (
        ("I'm getting a {error} in my {lang} script, any idea why?", (
            "A {error} usually points at one line in the traceback; start there.",
            "Can you paste the full error? A {error} in {lang} can have a few causes.",
        )),
        ("How do I read a CSV file in {lang}?", (
            "In {lang} the standard library or a popular package can read CSV for you.",
        )),
        ("My {lang} tests pass locally but fail in CI.", (
            "Tests that fail only in CI are often about environment variables or versions.",
        )),
        ("Should I learn {lang} or {lang} first?", (
            "Either is fine; pick the one used by the projects you care about.",
        )),
        ("What's a good way to structure a small {lang} project?", (
            "Start small: one module, a tests folder and a README.",
        )),
        ("How do I undo my last git commit?", (
            "git reset --soft HEAD~1 undoes the commit but keeps your changes.",
        )),
        ("My {lang} program got really slow after the last change.", (
            "A profiler will show where the time goes; guessing is usually wrong.",
        )),
        ("Can you explain what a race condition is, simply?", (
            "A race condition is when the result depends on which of two things happens first.",
        )),
    ),
    "travel": (
        ("I'm planning a long weekend in {dest}, what should I see?", (
            "In {dest}, a walking tour on the first day helps you get your bearings.",
            "{dest} has great neighbourhoods to wander; the old town is a good start.",
        )),
        ("Is {month} a good time to visit {dest}?", (
            "{dest} is lovely in {month}; book accommodation early.",
        )),
        ("How many days do you need for {dest}?", (
            "Three or four days is enough for the highlights of {dest}.",
        )),
        ("Looking for cheap flights to {dest} in {month}.", (
            "Flights midweek in {month} tend to be cheaper.",
        )),
        ("A friend just got back from {dest} and loved it.", (
            "{dest} gets great reviews; maybe it's next on your list?",
        )),
        ("Do I need to book restaurants in advance in {dest}?", (
            "For popular places in {dest}, booking a few days ahead is wise.",
        )),
        ("What should I pack for {dest} in {month}?", (
            "Layers and a light rain jacket cover most of {month}.",
        )),
        ("Thinking about a train trip through {dest} and {dest}.", (
            "Trains between cities are a relaxed way to travel; book early for better fares.",
        )),
    ),
    "fitness": (
        ("I did {workout} this morning and I'm exhausted.", (
            "Well done! Drink some water and take it easy this afternoon.",
        )),
        ("How many times a week should I do {workout}?", (
            "Two or three sessions of {workout} a week is plenty to start.",
        )),
        ("My {bodypart} is sore after yesterday's workout.", (
            "A sore {bodypart} should ease in a couple of days; stretch gently.",
        )),
        ("Trying to hit {steps} steps a day.", (
            "{steps} steps is a great target; short walks after meals help.",
        )),
        ("I skipped {workout} again this week.", (
            "Missing a week is fine; just pick it up again on {day}.",
        )),
        ("What should I eat before {workout}?", (
            "Something light with carbs an hour before works for most people.",
        )),
    ),
    "plants": (
        ("My {plant} leaves are turning yellow.", (
            "Yellow leaves on a {plant} often mean overwatering.",
        )),
        ("When should I repot my {plant}?", (
            "Spring is the best time to repot most houseplants.",
        )),
        ("I want to grow {herb} on the balcony.", (
            "{herb} does well in a sunny spot with well-drained soil.",
        )),
        ("How often do I water a {plant}?", (
            "Water a {plant} when the top few centimetres of soil are dry.",
        )),
        ("I think I killed my {herb}, it's all droopy.", (
            "Droopy {herb} can often be saved: trim it back and water deeply.",
        )),
        ("Got a {plant} as a gift, how do I keep it alive?", (
            "A {plant} likes bright indirect light and not too much water.",
        )),
    ),
    "money": (
        ("I'm trying to save {amount} by the end of the year.", (
            "Saving {amount} is doable if you put a fixed amount aside each payday.",
        )),
        ("Is it worth buying a {gadget} on sale?", (
            "A {gadget} on sale is a good deal if you'd use it every week.",
        )),
        ("I spent way too much on {purchase} this month.", (
            "Tracking spending for one month usually shows where the money goes.",
            "Setting a weekly limit for {purchase} can help.",
        )),
        ("How do I make a simple monthly budget?", (
            "List fixed costs first, then set limits for {purchase} and other extras.",
        )),
        ("Should I cancel some subscriptions? I have way too many.", (
            "Going through your bank statement for recurring payments is a good start.",
        )),
        ("My energy bill went up again.", (
            "Comparing tariffs once a year can save a fair bit.",
        )),
    ),
    "music": (
        ("I've had {band} on repeat all week.", (
            "If you like {band}, try {band} too.",
        )),
        ("Going to see {band} live in {month}!", (
            "Enjoy the concert, {band} are supposed to be great live.",
        )),
        ("Can you suggest a playlist for {mood}?", (
            "For {mood}, something instrumental with a steady beat works well.",
        )),
        ("Trying to learn a {band} song on the guitar.", (
            "Start with the chords slowly and speed up once they're clean.",
        )),
        ("What's the best {band} album to start with?", (
            "Most fans would say start with their best-known record and go from there.",
        )),
    ),
    "home": (
        ("The {fixture} in the {room} is leaking again.", (
            "A leaking {fixture} often just needs a new washer or seal.",
            "If it keeps happening, it might be worth calling a plumber.",
        )),
        ("How do I fix a squeaky {fixture}?", (
            "A drop of oil on the moving parts usually sorts out a squeaky {fixture}.",
        )),
        ("Thinking of painting the {room} {colour}.", (
            "{colour} works well in a {room} with good light.",
        )),
        ("The {room} is such a mess after the weekend.", (
            "Fifteen minutes of tidying a day keeps the {room} manageable.",
        )),
        ("The {fixture} is making a weird noise.", (
            "Strange noises from a {fixture} are worth checking before they get worse.",
        )),
        ("Any tips for decluttering the {room}?", (
            "Start with one shelf or drawer at a time; it's less overwhelming.",
        )),
    ),
    "work": (
        ("Had a long meeting with {colleague} about the {project} project.", (
            "Long meetings are draining. Did you agree on next steps?",
        )),
        ("The {project} report is due {day}.", (
            "Good luck with the {project} report, break it into small pieces.",
        )),
        ("{colleague} keeps scheduling meetings at lunchtime.", (
            "It might help to block lunch in your calendar.",
            "Maybe mention it to {colleague}; they might not realise.",
        )),
        ("How do I write a polite email to push back a deadline?", (
            "Acknowledge the request, explain the constraint, propose a new date.",
        )),
        ("I have a performance review with {colleague} on {day}.", (
            "For a review, jot down three things that went well and one to improve.",
        )),
        ("Can you help me make a to-do list for the {project} work?", (
            "Start the list with whatever blocks other people on the {project} work.",
        )),
    ),
    "games": (
        ("We played {game} last night until 1 am.", (
            "Sounds like a good night! Who won?",
        )),
        ("Any tips for getting better at {game}?", (
            "{game} rewards planning a few turns ahead.",
            "Watching a few experienced players is a quick way to improve at {game}.",
        )),
        ("What's a good two-player game like {game}?", (
            "If you like {game}, you might enjoy {game} as well.",
        )),
        ("I keep losing at {game} to {friend}.", (
            "Losing to {friend} just means you'll learn faster.",
        )),
    ),
    "news": (
        ("Did you see the news about {news}?", (
            "I can't browse the news, but happy to talk it through.",
        )),
        ("My phone battery is dead by {time} every day.", (
            "Battery drain like that is often a background app; check the battery settings.",
        )),
        ("Should I upgrade to a new {gadget}?", (
            "If your current {gadget} still works, it may be worth waiting a year.",
        )),
        ("Everyone at work is talking about {news}.", (
            "Big news stories can be a lot; it's fine to take a break from them.",
        )),
    ),
    "social": (
        ("Going to {friend}'s birthday party on {day}.", ("Have fun on {day}!",)),
        ("{friend} and I are going hiking on {day}.", (
            "Hiking with a friend is a great way to spend {day}.",
        )),
        ("What's a good gift for a friend who likes {interest}?", (
            "For someone into {interest}, {gift} is a safe bet.",
        )),
        ("{friend} cancelled on me again.", (
            "That's frustrating; maybe suggest a specific time next time.",
        )),
        ("I haven't seen {friend} in months, should I reach out?", (
            "A short message is usually welcome, even after months.",
        )),
    ),
    "sleep": (
        ("Only got {hours} hours of sleep last night.", (
            "{hours} hours isn't much; a short nap before 3 pm can help.",
        )),
        ("I keep waking up at 4 am for no reason.", (
            "A consistent wake-up time helps more than an early bedtime.",
        )),
        ("Is it bad to look at my phone in bed?", (
            "Screens in bed can make falling asleep harder for some people.",
        )),
        ("Trying to go to bed earlier this week.", (
            "Dimming the lights an hour before bed helps a lot of people.",
        )),
    ),
    "commute": (
        ("The {transport} was late again this morning.", (
            "Delays are frustrating; maybe leave ten minutes earlier on {day}s.",
        )),
        ("Thinking about cycling to work instead of the {transport}.", (
            "Cycling is great once you find a quiet route.",
        )),
        ("What can I do on a 40-minute {transport} ride?", (
            "Podcasts or an audiobook make a {transport} ride go faster.",
        )),
    ),
    "learning": (
        ("I want to take an online course in {subject}.", (
            "Pick a small project in {subject}; it keeps motivation up.",
        )),
        ("How do I stay motivated learning {subject}?", (
            "Short daily practice beats long weekly sessions for {subject}.",
        )),
        ("Is {subject} hard to pick up as an adult?", (
            "Most people can learn the basics of {subject} in a few weeks.",
        )),
    ),
    "holidays": (
        ("Already stressing about {holiday} plans.", (
            "Planning {holiday} early takes some of the stress away.",
        )),
        ("Who hosts {holiday} this year is a whole family debate.", (
            "Taking turns hosting {holiday} keeps it fair.",
        )),
        ("Any ideas for cheap gifts for {holiday}?", (
            "Homemade treats or {gift} make nice cheap gifts.",
        )),
    ),
}
# fmt: on

SMALL_TALK = (
    ("Good morning!", "Good morning! What's on your mind today?"),
    ("Thanks, that helps.", "You're welcome! Anything else?"),
    ("Haha, fair enough.", "Glad that made sense!"),
    ("Ok, I'll try that.", "Let me know how it goes."),
    ("I'm back, long day.", "Welcome back! Want to talk about it?"),
    ("Hmm, not sure about that.", "Fair, we can look at other options."),
    ("Quick question.", "Sure, go ahead."),
    ("That's all for now, thanks!", "Anytime. Talk soon!"),
    ("You're a lifesaver.", "Happy to help!"),
    ("Sorry, got distracted.", "No worries, take your time."),
)

_FIELDS = string.Formatter()
# "a" before a vowel sound filled in by a slot ("a animal shelter"); "a used" stays.
_ARTICLE = re.compile(r"\b([Aa]) (?=[aeioAEIO])")


def _fill(rng: random.Random, template: str, slots: dict[str, str]) -> str:
    """``template`` with each field from ``slots``, else drawn (and remembered) from FILL;
    a field repeated in one template draws a new value for each occurrence after the first."""
    out = []
    seen: set[str] = set()
    for literal, field, _, _ in _FIELDS.parse(template):
        out.append(literal)
        if field is None:
            continue
        if field in slots and (field not in seen or field not in FILL):
            value = slots[field]
        else:
            value = rng.choice(FILL[field])
            if field not in slots:
                slots[field] = value
        seen.add(field)
        out.append(value)
    text = _ARTICLE.sub(r"\1n ", "".join(out))
    return text[0].upper() + text[1:]


def _dress(rng: random.Random, line: str, user: bool, asked: str = "") -> str:
    """Sometimes an opener or a closing remark around a filler line, for variety;
    an assistant's "Good question!" only after a question (``asked``)."""
    openers, closers = (
        (USER_OPENERS, USER_CLOSERS) if user else (ASSISTANT_OPENERS, ASSISTANT_CLOSERS)
    )
    if not user and asked.rstrip().endswith("?"):
        openers += QUESTION_OPENERS
    if rng.random() < 0.25:
        line = rng.choice(openers) + line
    if rng.random() < 0.25:
        line += rng.choice(closers)
    return line


@dataclass
class _Fact:
    category: Category
    values: dict[str, str]
    state_session: int
    change_session: int | None
    state_turn: str = ""
    change_turn: str = ""


def _sessions(rng: random.Random, n: int, days: int, end: datetime) -> list[datetime]:
    """``n`` session starts on distinct days within the ``days`` before ``end``."""
    offsets = sorted(rng.sample(range(1, days + 1), n), reverse=True)
    return [
        end - timedelta(days=d) + timedelta(hours=rng.randint(8, 21), minutes=rng.randrange(60))
        for d in offsets
    ]


def generate(
    seed: int = 0,
    users: int = 20,
    sessions: int = 30,
    days: int = 270,
    facts: int = 10,
    change_rate: float = 0.5,
    end: datetime | None = None,
) -> Dataset:
    """The data set for ``seed``: ``users`` x ``sessions`` sessions over ``days`` days.

    Each user states ``facts`` facts (distinct categories) in the first 40 % of their
    sessions; each changeable one changes with probability ``change_rate`` in a
    session between 55 % and 95 % of the way through. ``end`` (default: today's
    midnight UTC) is when the questions are asked; the last session is a day or more
    before it.
    """
    if end is None:
        end = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    if sessions > days:
        raise ValueError("sessions must be at most days (one session a day at most)")
    rng = random.Random(seed)
    turns: list[Turn] = []
    questions: list[Question] = []
    for u in range(users):
        user = f"u{u:02d}"
        names = _Names(rng)
        starts = _sessions(rng, sessions, days, end)
        early = max(1, int(0.4 * sessions))
        late = (max(early, int(0.55 * sessions)), max(early + 1, int(0.95 * sessions)))
        plan: list[_Fact] = []
        said: dict[str, datetime] = {}
        for category in rng.sample(CATEGORIES, min(facts, len(CATEGORIES))):
            values = category.draw(rng, names)
            change = None
            if category.change and rng.random() < change_rate:
                change = rng.randrange(*late)
            plan.append(_Fact(category, values, rng.randrange(early), change))

        for s, start in enumerate(starts):
            session = f"{user}-s{s:02d}"
            exchanges: list[tuple[str, str, _Fact | None, str]] = []
            topics = rng.sample(list(TOPICS), rng.randint(1, 3))
            length = rng.randint(8, 16)
            used: set[str] = set()  # topic lines said in this session, not repeated
            for j in range(length):
                r = rng.random()
                if r < 0.12:
                    fact = rng.choice(plan)
                    line = _fill(rng, rng.choice(fact.category.echo), dict(fact.values))
                    exchanges.append((_dress(rng, line, True), rng.choice(REACTIONS), None, ""))
                elif r < 0.22:
                    exchanges.append((*rng.choice(SMALL_TALK), None, ""))
                else:
                    pairs = TOPICS[topics[j * len(topics) // length]]
                    fresh = [p for p in pairs if p[0] not in used] or list(pairs)
                    template, replies = rng.choice(fresh)
                    used.add(template)
                    slots: dict[str, str] = {}
                    line = _dress(rng, _fill(rng, template, slots), True)
                    reply = _dress(rng, _fill(rng, rng.choice(replies), slots), False, line)
                    exchanges.append((line, reply, None, ""))
            for fact in plan:
                for when, templates, kind in (
                    (fact.state_session, fact.category.state, "state"),
                    (fact.change_session, fact.category.change, "change"),
                ):
                    if when == s:
                        line = _fill(rng, rng.choice(templates), dict(fact.values))
                        at = rng.randint(0, len(exchanges))
                        exchanges.insert(at, (line, rng.choice(ACKS), fact, kind))
            at_time = start
            for j, (line, reply, fact, kind) in enumerate(exchanges):
                for r, (role, text) in enumerate((("user", line), ("assistant", reply))):
                    turn_id = f"{session}-t{2 * j + r:02d}"
                    turns.append(Turn(turn_id, user, session, role, text, at_time))
                    said[turn_id] = at_time
                    at_time += timedelta(seconds=rng.randint(20, 120))
                    if fact is not None and role == "user":
                        if kind == "state":
                            fact.state_turn = turn_id
                        else:
                            fact.change_turn = turn_id

        for i, fact in enumerate(plan):
            question = _fill(rng, rng.choice(fact.category.ask), dict(fact.values))
            if fact.change_turn:
                evidence, superseded = (fact.change_turn,), (fact.state_turn,)
            else:
                evidence, superseded = (fact.state_turn,), ()
            questions.append(
                Question(
                    id=f"{user}-q{i:02d}",
                    user=user,
                    category=fact.category.name,
                    text=question,
                    asked_at=end,
                    evidence=evidence,
                    superseded=superseded,
                    stated_at=said[evidence[0]],
                )
            )
    return Dataset(turns, questions, end)


def main() -> None:
    data = generate()
    changed = sum(q.changed for q in data.questions)
    print(
        f"{len(data.turns)} turns, {len(data.questions)} questions ({changed} about changed "
        f"facts), ending {data.end:%Y-%m-%d}"
    )
    by_id = {t.id: t for t in data.turns}
    for q in data.questions[:12]:
        print(f"\n{q.id} [{q.category}] {q.text}")
        for tid in q.superseded:
            print(f"  old {by_id[tid].at:%Y-%m-%d} {by_id[tid].text}")
        for tid in q.evidence:
            print(f"  new {by_id[tid].at:%Y-%m-%d} {by_id[tid].text}")
    print("\nsample session:")
    first = data.turns[0].session
    for t in data.turns:
        if t.session == first:
            print(f"  {t.at:%Y-%m-%d %H:%M} {t.role}: {t.text}")


if __name__ == "__main__":
    main()
