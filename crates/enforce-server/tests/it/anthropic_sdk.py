"""Drives the real anthropic Python SDK against a server speaking the Messages API and prints
one JSON line per case: what the SDK made of the answer (its own types), or the exception it
raised. The Rust test (anthropic_sdk.rs) starts the server, runs this with the SDK installed
into the shared venv under target/, and asserts on the lines. Every case names itself in its
question, so the server side can count how often each one reached the model.

Usage: python anthropic_sdk.py BASE_URL MODEL
"""

import sys

import anthropic

import client_cases
from client_cases import enforcement

BASE_URL, MODEL = sys.argv[1], sys.argv[2]
client = anthropic.Anthropic(base_url=BASE_URL, api_key="sk-ant-test", max_retries=0)

WEATHER = {
    "name": "get_weather",
    "description": "The weather in a city",
    "input_schema": {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
    },
}


def blocks(message):
    out = []
    for block in message.content:
        if block.type == "text":
            out.append({"type": "text", "text": block.text})
        elif block.type == "tool_use":
            out.append({"type": "tool_use", "name": block.name, "input": block.input})
        else:
            out.append({"type": block.type})
    return out


def case(name, run):
    client_cases.case(name, run, anthropic.APIStatusError)


def request(question, **extra):
    """The arguments of one `messages.create` / `messages.stream` call asking `question`."""
    return {
        "model": MODEL,
        "max_tokens": 64,
        "messages": [{"role": "user", "content": question}],
        **extra,
    }


def streamed(question, **extra):
    """`messages.stream`: the text deltas as they came, and the final message."""
    with client.messages.stream(**request(question, **extra)) as stream:
        deltas = list(stream.text_stream)
        return deltas, stream.get_final_message()


def create_text(tag):
    m = client.messages.create(**request(f"Say hello {tag}", system="Be brief."))
    return {
        "blocks": blocks(m),
        "stop_reason": m.stop_reason,
        "usage": [m.usage.input_tokens, m.usage.output_tokens],
        "enforcement": enforcement(m),
        "request_id": m._request_id,
    }


def stream_text(tag):
    deltas, m = streamed(f"Say hello {tag}")
    return {
        "deltas": deltas,
        "blocks": blocks(m),
        "stop_reason": m.stop_reason,
        "usage": [m.usage.input_tokens, m.usage.output_tokens],
    }


def create_tool(tag):
    m = client.messages.create(**request(f"What is the weather in Oslo? {tag}", tools=[WEATHER]))
    return {"blocks": blocks(m), "stop_reason": m.stop_reason}


def stream_tool(tag):
    _, m = streamed(f"What is the weather in Oslo? {tag}", tools=[WEATHER])
    return {"blocks": blocks(m), "stop_reason": m.stop_reason}


def create_unresolved(tag):
    return {"blocks": blocks(client.messages.create(**request(f"Break the contract {tag}")))}


def stream_unresolved(tag):
    _, m = streamed(f"Break the contract {tag}")
    return {"blocks": blocks(m)}


case("create_text", create_text)
case("stream_text", stream_text)
case("create_tool", create_tool)
case("stream_tool", stream_tool)
case("create_unresolved", create_unresolved)
case("stream_unresolved", stream_unresolved)
