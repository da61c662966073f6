"""How a decoder reranker reads a query and a document: the prompt Qwen3-Reranker was trained
on (its model card's), which asks the model to answer "yes" or "no"; the score is the
probability of "yes" (engine/models/decoder_encoder.py YesNoHead).

The instruction and the query open the user's turn, the document closes it, and the
assistant's turn opens with an empty thinking section, so the next token is the answer.
"""

from __future__ import annotations

from dataclasses import dataclass

from engine.text.tokenizer import Tokenizer

SYSTEM = ('Judge whether the Document meets the requirements based on the Query and the Instruct provided. '
          'Note that the answer can only be "yes" or "no".')
INSTRUCTION = "Given a web search query, retrieve relevant passages that answer the query"
ANSWER_OPENING = "<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"


SYSTEM_TURN = f"<|im_start|>system\n{SYSTEM}<|im_end|>\n<|im_start|>user\n"


def user_text(query: str, document: str, instruction: str = INSTRUCTION) -> str:
    return f"<Instruct>: {instruction}\n<Query>: {query}\n<Document>: {document}"


@dataclass(frozen=True)
class YesNoPrompt:
    """A query and a document in Qwen3-Reranker's prompt, as token ids: the system turn, the
    user's text tokenized whole (as the model card's code does), and the answer's opening.
    A document cut by `max_second` is tokenized on its own and cut by its own tokens."""

    tokenizer: Tokenizer
    instruction: str = INSTRUCTION

    def encode_pair(self, first: str, second: str, max_second: int | None = None) -> tuple[list[int], None]:
        def encode(text: str) -> list[int]:
            return self.tokenizer.encode(text, add_special_tokens=False)

        user = encode(user_text(first, second, self.instruction))
        if max_second is not None:
            document = encode(second)
            if len(document) > max_second:
                user = encode(user_text(first, "", self.instruction)) + document[: max(max_second, 0)]
        return encode(SYSTEM_TURN) + user + encode(ANSWER_OPENING), None
