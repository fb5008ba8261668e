//! What search knows of English beyond the stemmer, for reading queries:
//!
//! - other forms of a word that Snowball does not bring to the same stem: derivations
//!   (`conversion` and `convert`, `analysis` and `analyze`, `history` and `historical`,
//!   `player` and `play`), British and American spellings (`colour`, `analyse`), and irregular
//!   forms (`bought`, `children`, `height`). A query's word finds tools that say another of its
//!   forms, for less than the word itself (`Weights::forms`); a form is only a candidate, and
//!   counts only if some tool has it;
//! - words of asking (`help`, `want`, `tell`) and generic verbs of APIs (`get`, `calculate`),
//!   which a query has whichever tool it wants and which count for less (`Weights::filler`,
//!   `Weights::verb`).
//!
//! Written by hand from English in general, not from any tool set or benchmark.

/// Endings that make one form of a word from another, either way round: a word ending in one
/// is also tried with the other in its place. Each pair says how English derives one part of
/// speech from another where Snowball's suffix rules leave different stems.
const ENDINGS: &[(&str, &str)] = &[
    // Nouns of action and their verbs.
    ("ersion", "ert"),   // conversion, convert
    ("ension", "end"),   // extension, extend
    ("ansion", "and"),   // expansion, expand
    ("ission", "it"),    // permission, permit
    ("ision", "ide"),    // decision, decide
    ("ision", "ise"),    // revision, revise
    ("usion", "ude"),    // inclusion, include
    ("osion", "ode"),    // explosion, explode
    ("iption", "ibe"),   // subscription, subscribe
    ("eption", "eive"),  // reception, receive
    ("uction", "uce"),   // reduction, reduce
    ("olution", "olve"), // solution, solve
    ("ification", "ify"),
    ("ication", "y"), // application, apply
    ("ysis", "yze"),  // analysis, analyze
    ("ysis", "yse"),
    ("ytics", "yze"),
    ("ival", "ive"), // arrival, arrive
    ("oval", "ove"), // removal, remove
    ("osal", "ose"), // proposal, propose
    ("osition", "ose"),
    ("eipt", "eive"), // receipt, receive
    ("ure", ""),      // failure, fail
    ("ure", "e"),     // closure, close
    ("iry", "ire"),   // inquiry, inquire
    ("al", ""),       // rental, rent
    // Adjectives and their nouns.
    ("ical", "y"), // historical, history
    ("ic", "y"),   // economic, economy
    ("ancial", "ance"),
    ("ential", "ence"),
    // Agents and what they do.
    ("er", ""),   // player, play
    ("ers", ""),  // players, play
    ("or", ""),   // editor, edit
    ("ors", ""),  // editors, edit
    ("ier", "y"), // supplier, supply
    ("ee", ""),   // employee, employ
    // Peoples and places.
    ("an", "a"),   // American, America
    ("ian", "a"),  // Canadian, Canada
    ("ian", "y"),  // Italian, Italy
    ("ese", "a"),  // Chinese, China
    ("ese", "an"), // Japanese, Japan
    // British and American spelling.
    ("ise", "ize"),
    ("ised", "ized"),
    ("isation", "ization"),
    ("yse", "yze"),
    ("our", "or"),
    ("tre", "ter"),
    ("ogue", "og"),
];

/// The shortest part of a word an ending is taken from or added to: shorter, and too many
/// words look alike.
const MIN_BASE: usize = 3;

/// Irregular forms, each group one word's: verbs' pasts, nouns' plurals, and the nouns of
/// measure made from adjectives.
const IRREGULAR: &[&[&str]] = &[
    &["buy", "bought"],
    &["sell", "sold"],
    &["find", "found"],
    &["send", "sent"],
    &["pay", "paid"],
    &["make", "made"],
    &["take", "took", "taken"],
    &["give", "gave", "given"],
    &["get", "got", "gotten"],
    &["win", "won"],
    &["lose", "lost", "loss"],
    &["run", "ran"],
    &["fly", "flew", "flown", "flight"],
    &["write", "wrote", "written"],
    &["spend", "spent"],
    &["build", "built"],
    &["leave", "left"],
    &["bring", "brought"],
    &["think", "thought"],
    &["teach", "taught"],
    &["catch", "caught"],
    &["eat", "ate", "eaten"],
    &["drive", "drove", "driven"],
    &["ride", "rode", "ridden"],
    &["speak", "spoke", "spoken", "speech"],
    &["choose", "chose", "chosen", "choice"],
    &["begin", "began", "begun"],
    &["sing", "sang", "sung", "song"],
    &["draw", "drew", "drawn"],
    &["grow", "grew", "grown", "growth"],
    &["know", "knew", "known", "knowledge"],
    &["see", "saw", "seen", "sight"],
    &["go", "went", "gone"],
    &["hold", "held"],
    &["keep", "kept"],
    &["meet", "met"],
    &["tell", "told"],
    &["say", "said"],
    &["hear", "heard"],
    &["sit", "sat", "seat"],
    &["rise", "rose", "risen"],
    &["fall", "fell", "fallen"],
    &["break", "broke", "broken"],
    &["steal", "stole", "stolen", "theft"],
    &["freeze", "froze", "frozen"],
    &["die", "died", "death", "dead"],
    &["live", "life", "alive"],
    &["bear", "born", "birth"],
    &["child", "children"],
    &["person", "people"],
    &["man", "men"],
    &["woman", "women"],
    &["mouse", "mice"],
    &["foot", "feet"],
    &["tooth", "teeth"],
    &["criterion", "criteria"],
    &["datum", "data"],
    &["medium", "media"],
    &["index", "indices"],
    &["matrix", "matrices"],
    &["vertex", "vertices"],
    &["high", "height"],
    &["long", "length"],
    &["wide", "width"],
    &["deep", "depth"],
    &["strong", "strength"],
    &["hot", "heat"],
    &["weigh", "weight"],
    &["true", "truth"],
];

/// Calls `each` with the other forms of `word` (lower case), each once at most per rule; some
/// may be `word` itself or not words at all.
pub(super) fn forms(word: &str, mut each: impl FnMut(&str)) {
    let mut form = String::new();
    for &(a, b) in ENDINGS {
        for (from, to) in [(a, b), (b, a)] {
            if let Some(base) = word.strip_suffix(from)
                && base.chars().count() >= MIN_BASE
            {
                form.clear();
                form.push_str(base);
                form.push_str(to);
                each(&form);
            }
        }
    }
    for group in IRREGULAR {
        if group.contains(&word) {
            for other in group.iter().filter(|w| **w != word) {
                each(other);
            }
        }
    }
}

/// Words of asking rather than of what is asked for (`could you help me find`, `I'm looking
/// for`, `I want to know`, `tell me`): every kind of request has them, and a tool named after
/// one (`help`, `look_at`) should not come first for all of them. A query's such word counts
/// for less (`Weights::filler`).
pub(super) fn is_filler(word: &str) -> bool {
    matches!(
        word,
        "help"
            | "want"
            | "wanna"
            | "wish"
            | "need"
            | "like"
            | "love"
            | "know"
            | "tell"
            | "think"
            | "look"
            | "looking"
            | "wonder"
            | "wondering"
            | "kindly"
            | "hi"
            | "hello"
            | "hey"
            | "thank"
            | "thanks"
            | "sure"
            | "also"
            | "just"
            | "really"
            | "interested"
            | "curious"
            | "mood"
            | "feel"
            | "possible"
            | "able"
            | "let"
            | "assist"
            | "assistance"
            | "appreciate"
            | "some"
            | "any"
            | "about"
            | "now"
    )
}

/// Verbs that many tools' names start with (`get_`, `calculate_`, `find_`): a request
/// says one of them whichever tool it wants. A query's such word counts for `Weights::verb`.
pub(super) fn is_generic_verb(word: &str) -> bool {
    matches!(
        word,
        "get"
            | "calculate"
            | "compute"
            | "find"
            | "search"
            | "retrieve"
            | "fetch"
            | "obtain"
            | "determine"
            | "estimate"
            | "provide"
            | "give"
    )
}
