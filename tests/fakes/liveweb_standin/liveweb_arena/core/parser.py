"""Stand-in for liveweb_arena.core.parser (same parse_answers signature)."""


class AnswerParser:
    def parse_answers(self, response, num_answers):
        result = {f"answer{i + 1}": None for i in range(num_answers)}
        answers = (response or {}).get("answers") if isinstance(response, dict) else None
        for k, v in (answers or {}).items():
            if k in result:
                result[k] = None if v is None else str(v)
        return result
