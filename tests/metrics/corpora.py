"""Test corpora: realistic (COCO-like) captions with punctuation, clitics, hyphens and numbers; random ones."""

from __future__ import annotations

import random

import numpy as np

CAPTIONS: list[str] = [
    "A man riding a wave on top of a surfboard.",
    "A dog's toy, on the table.",
    "Two men (one in a hat) aren't playing \"frisbee\".",
    "A black-and-white cat sits on a 3.5-inch T.V. stand",
    "The man's 1,000 dollars & $5 bill; e.g. U.S. flag...",
    "A woman -- in red -- talks on her cell-phone!",
    "They can't find the ball; it's under the car.",
    "A 'cool' dog at 10:30 a.m. with 2/3 of a pizza",
    "Mr. Smith's dog... is sleeping?",
    "A group of people standing around a kitchen.",
    "A giraffe eating leaves from a tree at the zoo",
    "there is a plate of food with broccoli and carrots",
    "A cat laying on a bed next to a laptop computer.",
    "The kids' toys are scattered across the floor.",
    "A bus that is driving down the street, near a building.",
    "An old-fashioned clock tower in the middle of town.",
    "Someone is holding a hot dog with mustard & ketchup.",
    "A young boy swings a baseball bat at a pitch",
    "A stop sign that says 'STOP' at an intersection.",
    "Two zebras grazing in a field; one is looking up.",
    "A man in a t-shirt and jeans is skateboarding.",
    "It's a sunny day at the beach with 3 umbrellas",
    "A bowl of fruit: apples, bananas and oranges.",
    "People walking on a sidewalk in New York City.",
    "A close-up of a sandwich cut in half.",
    "A 747 jet flying through a clear blue sky",
    "A woman’s purse sits on a park bench.",
    "A baby elephant follows its mother.",
    "A train travels down the tracks at 5 p.m.",
    "a tennis player about to hit the ball!",
    "A motorcycle parked next to a car, outside a store",
    "Pizza w/ pepperoni on a wooden table",
    "A man who is wearing a tie and glasses",
    "A large brown bear walking through the woods.",
    "Three sheep standing in a grassy field , looking at the camera .",
    "A bathroom with a toilet, sink, and mirror.",
    "The U.S. flag flies over a building.",
    "A plate with a slice of cake and a fork...",
    "A kitchen with stainless-steel appliances and a 2-door fridge.",
    "A young girl is eating a donut; she's smiling.",
    "Don't miss the red double-decker bus in London!",
    "A man holding a sign that says \"free hugs\".",
    "a living room with a couch , a table , and a tv",
    "A herd of cows (brown and white) in a pasture.",
    "Two dogs play with a frisbee in the yard?",
    "A vase with flowers on a window-sill",
    "A woman is cutting a cake -- it's her birthday",
    "An airplane is parked at the airport's gate 12.",
    "The boy doesn't want to share his ice-cream.",
    "Several boats docked at a marina during sunset",
    "A man and a woman are posing for a picture.",
    "A laptop, a mouse, and a keyboard on a desk",
    "A 10-year-old boy flies a kite at the park.",
    "Skiers going down a snowy hill; it's cold.",
    "A clock reads 12:45 on the side of a building.",
    "A shelf with books and a teddy bear",
    "Cars are stopped at a red light in the city.",
    "A person holds an umbrella in the rain.",
    "Two people riding horses on the beach.",
    "A fire hydrant painted red, white & blue.",
    "",
]


def random_corpus(seed: int, images: int, vocab: int = 30, max_refs: int = 5) -> tuple[dict, dict]:
    """``(gts, res)`` of random captions over a small vocabulary, including empty and one-word candidates."""
    rng = random.Random(seed)
    words = [f"w{i}" for i in range(vocab)]

    def caption() -> str:
        return " ".join(rng.choices(words, k=rng.choice([0, 1, 2] + list(range(3, 14)) * 4)))

    gts = {i * 7 + 3: [caption() or "w0" for _ in range(rng.randint(1, max_refs))] for i in range(images)}
    res = {i: [caption()] for i in gts}
    return gts, res


def unusual_corpus() -> tuple[dict, dict]:
    """``(gts, res)`` whose captions hold NUL characters, Unicode whitespace, non-ASCII words and long tokens
    (issue 9: a NUL must not crash BLEU or CIDEr-D; pycocoevalcap treats it as an ordinary character)."""
    gts = {
        0: ["a\x00b c d", "a b c\x00", "a\x00 b c"],
        1: ["\x00 x y", "x\x00y z", "x y\u3000z"],
        2: ["café au lait", "cafe\xa0au lait", "un café"],
        3: ["a supercalifragilistic word here", "a supercalifragilisticx word"],
        4: ["p q r s", "p\tq r"],
    }
    res = {0: ["a\x00b c"], 1: ["\x00 x"], 2: ["café\u2003au lait"], 3: ["a supercalifragilistic word"], 4: ["p q\x00 r"]}
    return gts, res


def assert_same_scores(ours: tuple, expected: tuple, rtol: float = 1e-9) -> None:
    """``(corpus score, per-image scores)`` pairs agree (the per-image part may be arrays or lists)."""
    np.testing.assert_allclose(np.asarray(ours[0], dtype=float), np.asarray(expected[0], dtype=float), rtol=rtol, atol=1e-12)
    np.testing.assert_allclose(np.asarray(ours[1], dtype=float), np.asarray(expected[1], dtype=float), rtol=rtol, atol=1e-12)
