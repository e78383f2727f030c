"""A self-contained demo collection: topical documents, training pairs and validation pairs.

The quick start and the docker trainer use it when no corpus is given, so the project runs on a
fresh machine without `../shared/data`. It is made to show what a learned ranking adds to tf-idf:

- 30 topics, each with 3 subtopics of 4 *concepts*; every concept is a group of 3 synonyms
  ("telescope", "spyglass", "refractor").
- Every document has a *register*: for each concept it names, it mostly uses the synonym of its
  register. Two related documents written in different registers therefore say the same things
  with different words, which tf-idf cannot see and SSI learns from the pairs.
- Some words belong to two topics ("bank" of a river and of a lender, "pitch", "crane", "web"),
  and sentences borrow now and then from another topic, so shared words are not proof of
  relatedness either.
- A subtopic's documents come in *threads* of a few documents that dwell on the same concepts,
  each document in its own register. A document links to others of its thread (optionally also
  to random documents of its topic, as noise); the links are split at random into training and
  validation pairs. So a relevant document is found by its concepts, whatever its words.

Everything is drawn from one `random.Random(seed)` and never from a set's iteration order, so the
same seed gives byte-identical files under any PYTHONHASHSEED.

Files written into `--out`:

    corpus.jsonl       {"id", "title", "text"} per line
    train_pairs.tsv    query_id<TAB>doc_id   (document-document links for `ssi train --pairs`)
    valid_pairs.tsv    query_id<TAB>doc_id   (held-out links for `--valid-pairs`)
    queries.tsv        query_id<TAB>keywords (short keyword queries, one per subtopic and register)
    qrels.tsv          query-id<TAB>corpus-id<TAB>score  (the subtopic's documents are relevant)
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import typer

# topic -> 3 subtopics -> 4 concepts -> 3 synonyms ("a|b|c"). The first synonym of each
# concept is register 0, the second register 1, the third register 2.
TOPICS: dict[str, dict[str, tuple[str, str, str, str]]] = {
    "astronomy": {
        "sky watching": (
            "telescope|spyglass|refractor",
            "star|sun|luminary",
            "comet|meteor|fireball",
            "eyepiece|lens|ocular",
        ),
        "planets": (
            "planet|exoplanet|world",
            "orbit|revolution|trajectory",
            "moon|satellite|companion",
            "gravity|attraction|pull",
        ),
        "deep space": (
            "galaxy|nebula|starcloud",
            "universe|cosmos|heavens",
            "redshift|expansion|recession",
            "blackhole|singularity|collapsar",
        ),
    },
    "cooking": {
        "baking": ("oven|stove|range", "dough|batter|paste", "flour|meal|semolina", "loaf|bread|bun"),
        "sauces": ("sauce|gravy|dressing", "simmer|braise|stew", "garlic|shallot|onion", "pepper|spice|seasoning"),
        "knife work": ("knife|blade|cleaver", "chop|dice|mince", "board|block|slab", "fillet|cutlet|steak"),
    },
    "gardening": {
        "soil": ("soil|earth|loam", "compost|mulch|manure", "spade|shovel|trowel", "fertilizer|nutrient|feed"),
        "flowers": ("rose|tulip|peony", "bloom|blossom|flower", "petal|sepal|bract", "pollinator|bee|bumblebee"),
        "vegetables": (
            "tomato|courgette|squash",
            "seedling|sprout|shoot",
            "harvest|crop|yield",
            "greenhouse|polytunnel|coldframe",
        ),
    },
    "sailing": {
        "boats": ("yacht|sloop|ketch", "hull|keel|bow", "mast|spar|boom", "sail|canvas|jib"),
        "navigation": ("compass|bearing|heading", "chart|map|atlas", "harbour|port|marina", "lighthouse|beacon|buoy"),
        "weather at sea": ("gale|squall|storm", "tide|current|swell", "wave|breaker|roller", "anchor|mooring|tether"),
    },
    "music": {
        "instruments": (
            "guitar|lute|mandolin",
            "piano|keyboard|harpsichord",
            "violin|fiddle|viola",
            "drum|timpani|percussion",
        ),
        "theory": ("chord|harmony|triad", "melody|tune|air", "rhythm|beat|tempo", "scale|mode|key"),
        "performance": (
            "concert|recital|gig",
            "orchestra|ensemble|band",
            "conductor|maestro|bandleader",
            "pitch|tone|intonation",
        ),
    },
    "football": {
        "attack": ("goal|strike|finish", "striker|forward|attacker", "goalkeeper|keeper|goalie", "pass|cross|assist"),
        "competition": (
            "league|division|championship",
            "match|fixture|game",
            "referee|official|umpire",
            "trophy|cup|silverware",
        ),
        "matchday": ("stadium|arena|ground", "pitch|field|turf", "supporter|fan|crowd", "tackle|challenge|foul"),
    },
    "medicine": {
        "diagnosis": (
            "doctor|physician|clinician",
            "symptom|sign|complaint",
            "diagnosis|assessment|examination",
            "fever|temperature|pyrexia",
        ),
        "treatment": (
            "medicine|drug|medication",
            "dose|dosage|prescription",
            "surgery|operation|procedure",
            "therapy|treatment|remedy",
        ),
        "hospital": ("hospital|clinic|infirmary", "nurse|carer|orderly", "ward|unit|bay", "patient|sufferer|invalid"),
    },
    "finance": {
        "banking": ("bank|lender|creditor", "loan|mortgage|credit", "interest|yield|return", "deposit|savings|account"),
        "markets": (
            "stock|share|equity",
            "market|exchange|bourse",
            "investor|trader|broker",
            "portfolio|holdings|assets",
        ),
        "accounts": ("budget|forecast|plan", "tax|levy|duty", "profit|earnings|income", "debt|liability|arrears"),
    },
    "rivers": {
        "river courses": (
            "river|stream|brook",
            "bank|shore|riverside",
            "delta|estuary|mouth",
            "flood|inundation|deluge",
        ),
        "valleys": (
            "valley|gorge|canyon",
            "waterfall|cascade|cataract",
            "rapids|whitewater|torrent",
            "erosion|weathering|scouring",
        ),
        "river wildlife": ("trout|salmon|grayling", "otter|beaver|mink", "heron|kingfisher|egret", "reed|rush|sedge"),
    },
    "computing": {
        "hardware": ("computer|laptop|workstation", "processor|chip|cpu", "memory|ram|cache", "mouse|trackpad|pointer"),
        "software": (
            "program|application|software",
            "bug|defect|glitch",
            "compiler|interpreter|toolchain",
            "database|datastore|repository",
        ),
        "networks": (
            "network|internet|web",
            "server|host|node",
            "password|passphrase|credential",
            "firewall|gateway|router",
        ),
    },
    "birds": {
        "garden birds": ("sparrow|finch|wren", "robin|thrush|blackbird", "nest|roost|eyrie", "feather|plumage|down"),
        "raptors": ("eagle|hawk|falcon", "owl|kestrel|harrier", "talon|claw|grip", "prey|quarry|kill"),
        "migration": ("migration|passage|flyway", "crane|stork|ibis", "wing|pinion|flight", "song|call|chirp"),
    },
    "construction": {
        "building site": (
            "crane|hoist|derrick",
            "brick|block|masonry",
            "cement|concrete|mortar",
            "scaffold|staging|platform",
        ),
        "design": (
            "architect|designer|draughtsman",
            "blueprint|plan|drawing",
            "foundation|footing|base",
            "beam|girder|joist",
        ),
        "trades": (
            "carpenter|joiner|woodworker",
            "plumber|pipefitter|fitter",
            "electrician|wireman|sparky",
            "roof|rafter|truss",
        ),
    },
    "games": {
        "chess": ("bishop|knight|rook", "pawn|piece|man", "checkmate|mate|stalemate", "opening|gambit|defence"),
        "cards": ("card|deck|pack", "poker|bridge|rummy", "trick|hand|round", "ace|king|queen"),
        "board games": ("dice|die|cube", "board|grid|square", "token|counter|meeple", "turn|move|go"),
    },
    "medieval history": {
        "castles": ("castle|fortress|keep", "moat|ditch|trench", "siege|blockade|assault", "wall|rampart|battlement"),
        "knights": ("knight|squire|paladin", "armour|mail|plate", "sword|lance|mace", "horse|steed|charger"),
        "the crown": (
            "king|monarch|sovereign",
            "queen|consort|empress",
            "throne|crown|sceptre",
            "court|palace|household",
        ),
    },
    "coffee and tea": {
        "coffee": ("coffee|espresso|java", "bean|roast|grind", "barista|brewer|roaster", "mug|cup|beaker"),
        "tea": ("tea|infusion|tisane", "leaf|tip|bud", "teapot|kettle|urn", "steep|soak|infuse"),
        "cafes": ("cafe|coffeehouse|teahouse", "pastry|croissant|biscuit", "milk|cream|froth", "sugar|honey|sweetener"),
    },
    "weather": {
        "forecasts": ("forecast|outlook|prediction", "rain|drizzle|shower", "cloud|overcast|haze", "wind|breeze|gust"),
        "extremes": (
            "hurricane|cyclone|typhoon",
            "drought|dryness|aridity",
            "heatwave|scorcher|swelter",
            "blizzard|snowstorm|whiteout",
        ),
        "climate": (
            "climate|atmosphere|airmass",
            "carbon|emission|greenhouse",
            "glacier|icecap|icesheet",
            "thermometer|barometer|gauge",
        ),
    },
    "photography": {
        "cameras": ("camera|slr|rangefinder", "lens|objective|zoom", "tripod|monopod|stand", "flash|strobe|speedlight"),
        "exposure": (
            "exposure|aperture|fstop",
            "shutter|curtain|blade",
            "iso|sensitivity|gain",
            "light|illumination|brightness",
        ),
        "prints": (
            "photograph|snapshot|picture",
            "darkroom|lab|studio",
            "film|negative|emulsion",
            "portrait|landscape|still",
        ),
    },
    "running": {
        "racing": ("marathon|race|run", "sprint|dash|burst", "jog|trot|lope", "trainer|sneaker|shoe"),
        "gym": ("gym|studio|club", "dumbbell|barbell|kettlebell", "muscle|sinew|brawn", "stretch|warmup|mobility"),
        "health": ("heart|pulse|heartbeat", "stamina|endurance|fitness", "diet|nutrition|fuel", "injury|strain|sprain"),
    },
    "railways": {
        "trains": ("train|locomotive|engine", "carriage|coach|wagon", "track|rail|line", "station|halt|terminus"),
        "operations": (
            "timetable|schedule|roster",
            "signal|semaphore|light",
            "driver|engineer|motorman",
            "ticket|fare|pass",
        ),
        "age of steam": ("steam|boiler|firebox", "coal|fuel|coke", "viaduct|bridge|trestle", "tunnel|cutting|bore"),
    },
    "wine and beer": {
        "vineyards": ("vineyard|vine|estate", "grape|berry|cluster", "vintage|cuvee|bottling", "cellar|vault|cave"),
        "tasting": ("wine|claret|vino", "taste|palate|flavour", "aroma|bouquet|nose", "tannin|acidity|body"),
        "brewing": ("beer|ale|lager", "hop|bittering|malt", "yeast|ferment|culture", "barrel|cask|keg"),
    },
    "insects": {
        "beetles and moths": (
            "beetle|weevil|ladybird",
            "butterfly|moth|skipper",
            "ant|termite|colony",
            "larva|grub|caterpillar",
        ),
        "spiders": ("spider|arachnid|tarantula", "web|silk|gossamer", "venom|poison|toxin", "fang|chelicera|bite"),
        "bees": ("hive|apiary|skep", "honey|nectar|pollen", "queen|drone|worker", "sting|stinger|barb"),
    },
    "ocean life": {
        "open sea": ("shark|ray|dogfish", "reef|coral|atoll", "whale|dolphin|porpoise", "plankton|krill|algae"),
        "diving": ("diver|snorkeller|freediver", "wetsuit|drysuit|flipper", "oxygen|air|tank", "depth|fathom|abyss"),
        "the shore": ("beach|strand|sands", "crab|lobster|shrimp", "shell|conch|mussel", "rockpool|tidepool|lagoon"),
    },
    "art": {
        "painting": (
            "painting|canvas|artwork",
            "brush|bristle|paintbrush",
            "palette|colour|hue",
            "oil|acrylic|watercolour",
        ),
        "sculpture": ("sculpture|statue|figure", "marble|granite|stone", "chisel|mallet|rasp", "bronze|cast|foundry"),
        "galleries": (
            "gallery|museum|exhibition",
            "curator|collector|dealer",
            "artist|painter|master",
            "sketch|study|drawing",
        ),
    },
    "law": {
        "courts": (
            "courtroom|tribunal|bench",
            "judge|magistrate|justice",
            "jury|panel|juror",
            "verdict|ruling|judgment",
        ),
        "crime": (
            "crime|offence|felony",
            "police|constable|detective",
            "theft|burglary|robbery",
            "evidence|proof|testimony",
        ),
        "contracts": (
            "contract|agreement|deed",
            "lawyer|solicitor|attorney",
            "clause|provision|term",
            "lawsuit|claim|litigation",
        ),
    },
    "geology": {
        "volcanoes": (
            "volcano|crater|caldera",
            "lava|magma|molten",
            "eruption|explosion|outburst",
            "ash|tephra|cinder",
        ),
        "rocks": ("rock|boulder|crag", "crystal|mineral|gem", "fossil|ammonite|trilobite", "sediment|silt|clay"),
        "earthquakes": (
            "earthquake|quake|tremor",
            "fault|rift|fracture",
            "plate|tectonic|crust",
            "seismograph|seismometer|sensor",
        ),
    },
    "pets": {
        "dogs": ("dog|hound|puppy", "leash|lead|collar", "bark|howl|yap", "kennel|doghouse|crate"),
        "cats": ("cat|kitten|tomcat", "purr|meow|hiss", "whisker|paw|tail", "litter|tray|sandbox"),
        "pet care": (
            "vet|veterinarian|petdoctor",
            "grooming|brushing|bathing",
            "kibble|petfood|treat",
            "walk|stroll|outing",
        ),
    },
    "spaceflight": {
        "rockets": (
            "rocket|launcher|booster",
            "launch|liftoff|blastoff",
            "propellant|kerosene|hydrogen",
            "thruster|nozzle|motor",
        ),
        "astronauts": (
            "astronaut|cosmonaut|spacefarer",
            "spacesuit|helmet|visor",
            "capsule|module|lander",
            "mission|expedition|sortie",
        ),
        "space stations": (
            "spacestation|outpost|habitat",
            "dock|berth|airlock",
            "telemetry|uplink|downlink",
            "microgravity|weightlessness|freefall",
        ),
    },
    "theatre and film": {
        "stage": (
            "theatre|playhouse|stage",
            "actor|performer|player",
            "rehearsal|runthrough|practice",
            "script|screenplay|lines",
        ),
        "cinema": ("movie|feature|flick", "director|filmmaker|auteur", "scene|shot|take", "premiere|debut|launch"),
        "audience": (
            "audience|spectator|viewer",
            "applause|ovation|cheer",
            "critic|reviewer|columnist",
            "boxoffice|takings|gross",
        ),
    },
    "farming": {
        "crops": ("wheat|barley|oats", "tractor|plough|harrow", "irrigation|watering|sprinkler", "silo|granary|barn"),
        "livestock": ("cattle|cow|heifer", "sheep|ewe|lamb", "pig|sow|hog", "pasture|meadow|grazing"),
        "farm business": ("farmer|grower|rancher", "price|value|rate", "auction|sale|mart", "subsidy|grant|support"),
    },
    "mountains": {
        "climbing": ("mountain|peak|summit", "rope|cord|belay", "climber|mountaineer|alpinist", "ice|snowfield|serac"),
        "hiking": ("hike|trek|ramble", "trail|path|footpath", "backpack|rucksack|daypack", "boot|gaiter|crampon"),
        "camping": (
            "tent|shelter|bivouac",
            "campfire|fire|bonfire",
            "sleepingbag|bedroll|blanket",
            "lantern|torch|headlamp",
        ),
    },
}

# Sentence frames: every slot takes one concept word. The glue words are shared by all topics,
# so they carry no topic signal and tf-idf weighs them down.
SENTENCES = (
    "The {a} is often discussed together with the {b}.",
    "Anyone who studies the {a} soon learns about the {b}.",
    "A short history of the {a} must also mention the {b}.",
    "Many beginners confuse the {a} with the {b}, although they differ.",
    "In practice the {a} depends heavily on the {b} and the {c}.",
    "Experienced people check the {a} before they think about the {b}.",
    "This article explains how the {a} and the {b} fit together.",
    "Local enthusiasts argue endlessly about the best {a}.",
    "Without a good {a}, the {b} becomes much harder.",
    "Several recent books describe the {a} in great detail.",
    "The old guide recommends starting with the {a}.",
    "One common question is whether the {a} matters more than the {b}.",
    "The {a}, the {b} and the {c} are the usual starting points.",
    "Some say the {a} is overrated, while others defend it.",
    "Our visit began with the {a} and ended with the {b}.",
    "There is a surprising amount to say about the {a}.",
    "Careful attention to the {a} usually pays off.",
    "Records from last year show growing interest in the {a}.",
    "Nobody expected the {a} to outlast the {b}.",
    "A friend once compared the {a} to the {b}, and the comparison stuck.",
)
TITLES = (
    "The {a} and the {b}",
    "Notes on the {a}",
    "A guide to the {a} and the {b}",
    "Understanding the {a}",
    "Why the {a} matters",
    "The {a} explained",
    "Thoughts on the {a} and the {b}",
    "From the {a} to the {b}",
)

N_REGISTERS = 3


@dataclass(frozen=True)
class DemoConfig:
    seed: int = 13
    topics: int = len(TOPICS)
    docs_per_subtopic: int = 12
    sentences: tuple[int, int] = (5, 8)
    register_loyalty: float = 0.95
    """Probability that a document names a concept by its own register's synonym."""
    off_topic: float = 0.08
    """Probability that a sentence borrows a concept from another topic."""
    thread_size: int = 4
    """Documents of a subtopic come in threads that dwell on the same concepts, in their own words."""
    links_within: int = 3
    """Links from each document to the other documents of its thread."""
    links_across: int = 0
    """Links from each document to other documents of its topic."""
    valid_fraction: float = 0.15


@dataclass(frozen=True)
class DemoDoc:
    id: str
    title: str
    text: str
    topic: str
    subtopic: str


@dataclass
class DemoCollection:
    docs: list[DemoDoc]
    train_pairs: list[tuple[str, str]]
    valid_pairs: list[tuple[str, str]]
    queries: list[tuple[str, str]]
    qrels: list[tuple[str, str]]


def _slug(name: str) -> str:
    return name.replace(" ", "-")


def _concepts(topic: str) -> list[tuple[str, list[str]]]:
    """(subtopic, synonyms) for every concept of a topic, in a fixed order."""
    return [(sub, group.split("|")) for sub, groups in TOPICS[topic].items() for group in groups]


def _pick_word(rng: random.Random, synonyms: list[str], register: int, loyalty: float) -> str:
    if rng.random() < loyalty:
        return synonyms[register]
    return rng.choice(synonyms)


def _fill(frame: str, words: list[str]) -> str:
    slots = {"a": words[0], "b": words[1], "c": words[2]}
    text = frame.format(**slots)
    return text[0].upper() + text[1:]


def _focus(rng: random.Random, topic: str, subtopic: str) -> list[list[str]]:
    """The concepts a thread of documents dwells on: three of its subtopic's, two of the topic's others."""
    concepts = _concepts(topic)
    own = [syn for sub, syn in concepts if sub == subtopic]
    rest = [syn for sub, syn in concepts if sub != subtopic]
    return rng.sample(own, 3) + rng.sample(rest, 2)


FOCUS_WEIGHTS = (4, 3, 3, 1, 1)


def _document(
    rng: random.Random,
    cfg: DemoConfig,
    doc_id: str,
    topic: str,
    subtopic: str,
    focus: list[list[str]],
    topic_names: list[str],
) -> DemoDoc:
    register = rng.randrange(N_REGISTERS)

    def concept_word() -> str:
        if rng.random() < cfg.off_topic:
            other = rng.choice([t for t in topic_names if t != topic])
            _, synonyms = rng.choice(_concepts(other))
            return _pick_word(rng, synonyms, rng.randrange(N_REGISTERS), cfg.register_loyalty)
        synonyms = rng.choices(focus, weights=FOCUS_WEIGHTS)[0]
        return _pick_word(rng, synonyms, register, cfg.register_loyalty)

    def distinct_words(n: int) -> list[str]:
        words: list[str] = []
        while len(words) < n:
            word = concept_word()
            if word not in words:
                words.append(word)
        return words

    title_words = [_pick_word(rng, focus[0], register, 1.0), _pick_word(rng, focus[1], register, 1.0), ""]
    title = _fill(rng.choice(TITLES), title_words)
    n_sentences = rng.randint(*cfg.sentences)
    frames = rng.sample(SENTENCES, n_sentences)
    text = " ".join(_fill(frame, distinct_words(3)) for frame in frames)
    return DemoDoc(id=doc_id, title=title, text=text, topic=topic, subtopic=subtopic)


def generate(cfg: DemoConfig = DemoConfig()) -> DemoCollection:  # noqa: B008 - frozen default
    """Build the whole collection in memory; the same config always gives the same collection."""
    if not 1 <= cfg.topics <= len(TOPICS):
        raise ValueError(f"topics must be between 1 and {len(TOPICS)}")
    if cfg.docs_per_subtopic < 2 or cfg.thread_size < 2:
        raise ValueError("docs_per_subtopic and thread_size must be at least 2 (a document needs someone to link to)")
    rng = random.Random(cfg.seed)
    topic_names = list(TOPICS)[: cfg.topics]

    docs: list[DemoDoc] = []
    threads: list[list[str]] = []
    thread_of: dict[str, int] = {}
    by_subtopic: dict[tuple[str, str], list[str]] = {}
    by_topic: dict[str, list[str]] = {}
    for topic in topic_names:
        number = 0
        for subtopic in TOPICS[topic]:
            for start in range(0, cfg.docs_per_subtopic, cfg.thread_size):
                focus = _focus(rng, topic, subtopic)
                threads.append([])
                for _ in range(min(cfg.thread_size, cfg.docs_per_subtopic - start)):
                    number += 1
                    doc = _document(rng, cfg, f"{_slug(topic)}-{number:03d}", topic, subtopic, focus, topic_names)
                    docs.append(doc)
                    threads[-1].append(doc.id)
                    thread_of[doc.id] = len(threads) - 1
                    by_subtopic.setdefault((topic, subtopic), []).append(doc.id)
                    by_topic.setdefault(topic, []).append(doc.id)

    links: list[tuple[str, str]] = []
    for doc in docs:
        mates = [d for d in threads[thread_of[doc.id]] if d != doc.id]
        others = [d for d in by_topic[doc.topic] if d != doc.id and d not in mates]
        targets = rng.sample(mates, min(cfg.links_within, len(mates)))
        targets += rng.sample(others, min(cfg.links_across, len(others)))
        links.extend((doc.id, target) for target in targets)

    train_pairs: list[tuple[str, str]] = []
    valid_pairs: list[tuple[str, str]] = []
    for link in links:
        (valid_pairs if rng.random() < cfg.valid_fraction else train_pairs).append(link)

    # Keyword queries: two concepts of a subtopic, written in one register. Relevant: the
    # subtopic's documents, whatever words they use.
    queries: list[tuple[str, str]] = []
    qrels: list[tuple[str, str]] = []
    for topic in topic_names:
        for subtopic, groups in TOPICS[topic].items():
            for register in range(N_REGISTERS):
                first, second = rng.sample(list(groups), 2)
                qid = f"q-{_slug(topic)}-{_slug(subtopic)}-{register}"
                queries.append((qid, f"{first.split('|')[register]} {second.split('|')[register]}"))
                qrels.extend((qid, doc_id) for doc_id in by_subtopic[(topic, subtopic)])
    return DemoCollection(docs=docs, train_pairs=train_pairs, valid_pairs=valid_pairs, queries=queries, qrels=qrels)


def write(collection: DemoCollection, out: Path) -> dict[str, Path]:
    """Write the collection's files into `out` (created if needed); returns their paths by role."""
    out.mkdir(parents=True, exist_ok=True)
    paths = {
        "corpus": out / "corpus.jsonl",
        "train_pairs": out / "train_pairs.tsv",
        "valid_pairs": out / "valid_pairs.tsv",
        "queries": out / "queries.tsv",
        "qrels": out / "qrels.tsv",
    }
    with paths["corpus"].open("w", encoding="utf-8", newline="\n") as handle:
        for doc in collection.docs:
            handle.write(json.dumps({"id": doc.id, "title": doc.title, "text": doc.text}, ensure_ascii=False) + "\n")
    for role in ("train_pairs", "valid_pairs"):
        rows = getattr(collection, role)
        paths[role].write_text("".join(f"{q}\t{d}\n" for q, d in rows), encoding="utf-8", newline="\n")
    paths["queries"].write_text("".join(f"{q}\t{t}\n" for q, t in collection.queries), encoding="utf-8", newline="\n")
    paths["qrels"].write_text(
        "query-id\tcorpus-id\tscore\n" + "".join(f"{q}\t{d}\t1\n" for q, d in collection.qrels),
        encoding="utf-8",
        newline="\n",
    )
    return paths


_DEFAULTS = DemoConfig()


def main(
    out: Annotated[
        Path,
        typer.Option(
            help="Folder to write corpus.jsonl, train_pairs.tsv, valid_pairs.tsv, "
            "queries.tsv and qrels.tsv into (created if missing)."
        ),
    ],
    seed: Annotated[
        int, typer.Option(help="Random seed; the same seed always writes the same files.")
    ] = _DEFAULTS.seed,
    topics: Annotated[
        int, typer.Option(min=1, max=len(TOPICS), help=f"How many of the {len(TOPICS)} topics to use.")
    ] = _DEFAULTS.topics,
    docs_per_subtopic: Annotated[
        int, typer.Option(min=2, help="Documents per subtopic (3 subtopics a topic).")
    ] = _DEFAULTS.docs_per_subtopic,
    thread_size: Annotated[
        int,
        typer.Option(
            min=2, help="Documents per thread: a thread's documents dwell on the same concepts, each in its own words."
        ),
    ] = _DEFAULTS.thread_size,
    links_within: Annotated[
        int, typer.Option(min=0, help="Links from each document to others of its thread.")
    ] = _DEFAULTS.links_within,
    links_across: Annotated[
        int, typer.Option(min=0, help="Links from each document to random others of its topic (noise).")
    ] = _DEFAULTS.links_across,
    valid_fraction: Annotated[
        float, typer.Option(min=0.0, max=1.0, help="Share of the links held out as validation pairs.")
    ] = _DEFAULTS.valid_fraction,
) -> None:
    """Write the self-contained demo collection: topical documents whose related documents often use
    different words for the same things (synonyms), plus training and validation links."""
    cfg = DemoConfig(
        seed=seed,
        topics=topics,
        docs_per_subtopic=docs_per_subtopic,
        thread_size=thread_size,
        links_within=links_within,
        links_across=links_across,
        valid_fraction=valid_fraction,
    )
    collection = generate(cfg)
    paths = write(collection, out)
    typer.echo(
        f"wrote {len(collection.docs)} documents, {len(collection.train_pairs)} training pairs, "
        f"{len(collection.valid_pairs)} validation pairs and {len(collection.queries)} keyword queries to {out}"
    )
    for role, path in paths.items():
        typer.echo(f"  {role:12s} {path}")


if __name__ == "__main__":
    typer.run(main)
