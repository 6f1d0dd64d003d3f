"""Stand-in for liveweb_arena.core.validators.llm_validator: exact comparison instead of an LLM."""


async def validate_answers_with_llm(llm_client, subtasks, answers, ground_truths, validation_rules=None, parallel=True):
    llm_client.calls += 1
    out = []
    for st in subtasks:
        actual, expected = answers.get(st.answer_tag), ground_truths.get(st.answer_tag)
        ok = actual is not None and actual.strip() == str(expected)
        out.append({"question": st.intent, "answer_tag": st.answer_tag, "expected": expected, "actual": actual,
                    "score": 1.0 if ok else 0.0, "is_correct": ok, "reasoning": "exact match (stand-in)"})
    return out
