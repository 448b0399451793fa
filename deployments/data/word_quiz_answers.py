"""Writes word-quiz-answers.jsonl: the sft deployment's demonstrations, the word quiz's first 64 train questions
each answered with its word alone (what the quiz scores 1.0). The val and test splits use other words.

    .venv/bin/python deployments/data/word_quiz_answers.py      # rewrites the file next to this one
"""

from __future__ import annotations

import json
import os

from art_core.envs import load_environment
from art_core.envs.word_quiz import QUESTION

COUNT = 64


def main() -> None:
    out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "word-quiz-answers.jsonl")
    with open(out, "w") as f:
        for scenario in load_environment("word-quiz").scenarios("train")[:COUNT]:
            q = scenario.data
            article = "an" if q["category"][0] in "aeiou" else "a"
            question = QUESTION.format(article=article, category=q["category"], options=", ".join(q["options"]))
            answer = {"role": "assistant", "content": q["answer"].capitalize()}
            f.write(json.dumps({"messages": [{"role": "user", "content": question}, answer]}) + "\n")
    print(out)


if __name__ == "__main__":
    main()
