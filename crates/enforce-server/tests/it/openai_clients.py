"""Drives real OpenAI-flavoured Python clients against enforce's proxy and prints one JSON line
per case: what the client made of the answer (its own types), or the exception it raised.
The Rust test (openai_clients.rs) starts the server, runs this in the shared venv under
target/ and asserts on the lines. Every case names itself in its question, so the server side
can count how often each one reached the model.

Usage: python openai_clients.py BASE_URL MODEL FAMILY[,FAMILY...]
       (FAMILY: openai | langchain | agents; one run for several saves their shared imports)
The server also serves the model "draft", which streams every attempt as reasoning.
"""

import json
import sys

from pydantic import BaseModel

import client_cases
from client_cases import enforcement

BASE_URL, MODEL, FAMILY = sys.argv[1], sys.argv[2], sys.argv[3]
API = BASE_URL + "/v1"

WEATHER_PARAMS = {
    "type": "object",
    "properties": {"city": {"type": "string"}},
    "required": ["city"],
    "additionalProperties": False,
}


class Person(BaseModel):
    name: str
    age: int


def case(name, run):
    import openai

    client_cases.case(name, run, openai.APIStatusError)


# --- the openai SDK ---------------------------------------------------------------------------


def openai_family():
    import openai

    client = openai.OpenAI(base_url=API, api_key="sk-test", max_retries=0)
    tool = {
        "type": "function",
        "name": "get_weather",
        "description": "The weather in a city",
        "parameters": WEATHER_PARAMS,
        "strict": True,
    }

    def items(response):
        out = []
        for item in response.output:
            if item.type == "message":
                out.append({"type": "message", "text": "".join(c.text for c in item.content)})
            elif item.type == "function_call":
                out.append(
                    {
                        "type": "function_call",
                        "name": item.name,
                        "arguments": json.loads(item.arguments),
                        "call_id": item.call_id,
                    }
                )
            else:
                out.append({"type": item.type})
        return out

    def responses_text(tag):
        r = client.responses.create(
            model=MODEL, input=f"Say hello {tag}", instructions="Be brief."
        )
        return {
            "text": r.output_text,
            "status": r.status,
            "items": items(r),
            "usage": [r.usage.input_tokens, r.usage.output_tokens],
            "enforcement": enforcement(r),
            "request_id": r._request_id,
            "id": r.id,
        }

    def responses_stream_text(tag):
        kinds, deltas, final = [], [], None
        stream = client.responses.create(model=MODEL, input=f"Say hello {tag}", stream=True)
        for event in stream:
            kinds.append(event.type)
            if event.type == "response.output_text.delta":
                deltas.append(event.delta)
            elif event.type == "response.completed":
                final = event.response
        return {"events": kinds, "deltas": deltas, "text": final.output_text, "status": final.status}

    def responses_tool(tag):
        question = f"What is the weather in Oslo? {tag}"
        first = client.responses.create(model=MODEL, input=question, tools=[tool])
        call = next(i for i in first.output if i.type == "function_call")
        # The tool loop as the SDK's docs write it: the answer's output items go back as they
        # came (with their ids and status), then the call's output.
        second = client.responses.create(
            model=MODEL,
            tools=[tool],
            input=[
                {"role": "user", "content": question},
                *first.output,
                {"type": "function_call_output", "call_id": call.call_id, "output": "12 C"},
            ],
        )
        return {"first": items(first), "second": items(second), "text": second.output_text}

    def responses_stream_tool(tag):
        # The SDK's accumulating helper: it checks every item's identity across events.
        with client.responses.stream(
            model=MODEL, input=f"What is the weather in Oslo? {tag}", tools=[tool]
        ) as stream:
            kinds = [event.type for event in stream]
            final = stream.get_final_response()
        return {"events": kinds, "items": items(final), "status": final.status}

    def responses_stream_draft_tool(tag):
        with client.responses.stream(
            model="draft", input=f"What is the weather in Oslo? {tag}", tools=[tool]
        ) as stream:
            kinds = [event.type for event in stream]
            final = stream.get_final_response()
        return {"events": kinds, "items": items(final)}

    def responses_parse(tag):
        r = client.responses.parse(model=MODEL, input=f"Who is Ada? {tag}", text_format=Person)
        return {"parsed": r.output_parsed.model_dump(), "type": type(r.output_parsed).__name__}

    def chat_parse(tag):
        c = client.chat.completions.parse(
            model=MODEL,
            messages=[{"role": "user", "content": f"Who is Ada? {tag}"}],
            response_format=Person,
        )
        parsed = c.choices[0].message.parsed
        return {
            "parsed": parsed.model_dump(),
            "type": type(parsed).__name__,
            "finish_reason": c.choices[0].finish_reason,
        }

    def chat_parse_unresolved(tag):
        c = client.chat.completions.parse(
            model=MODEL,
            messages=[{"role": "user", "content": f"Break: who is Ada? {tag}"}],
            response_format=Person,
        )
        return {"parsed": c.choices[0].message.parsed.model_dump()}

    def chat_stream_unresolved(model):
        def run(tag):
            stream = client.chat.completions.create(
                model=model,
                messages=[{"role": "user", "content": f"Break the contract {tag}"}],
                stream=True,
            )
            return {"chunks": [c.choices[0].delta.content for c in stream if c.choices]}

        return run

    def responses_unresolved(tag):
        r = client.responses.create(model=MODEL, input=f"Break the contract {tag}")
        return {"text": r.output_text}

    def responses_stream_unresolved(model):
        def run(tag):
            # A stream that already began reports the failure as its own event type.
            stream = client.responses.create(
                model=model, input=f"Break the contract {tag}", stream=True
            )
            for event in stream:
                if event.type == "response.failed":
                    return {
                        "ok": False,
                        "error": type(event).__name__,
                        "message": event.response.error.message,
                        "code": event.response.error.code,
                    }
                if event.type == "error":
                    return {"ok": False, "error": type(event).__name__, "message": event.message}
            return {"text": "no failure seen"}

        return run

    def responses_mended(tag):
        # The first answer breaks the contract; the client sees only the re-asked one.
        r = client.responses.create(model=MODEL, input=f"Mend the answer {tag}")
        extra = r.model_extra["enforcement"]
        return {"text": r.output_text, "status": r.status, "attempts": extra.get("attempts")}

    def responses_stream_draft(tag):
        with client.responses.stream(model="draft", input=f"Mend the answer {tag}") as stream:
            kinds = [event.type for event in stream]
            final = stream.get_final_response()
        reasoning = [
            "".join(part.text for part in item.summary)
            for item in final.output
            if item.type == "reasoning"
        ]
        return {
            "events": kinds,
            "items": [item.type for item in final.output],
            "reasoning": reasoning,
            "text": final.output_text,
        }

    def responses_continued(tag):
        first = client.responses.create(model=MODEL, input=f"Say hello {tag}")
        second = client.responses.create(
            model=MODEL, input=f"Say hello again {tag}", previous_response_id=first.id
        )
        again = client.responses.retrieve(first.id)
        return {
            "text": second.output_text,
            "previous": second.previous_response_id,
            "retrieved": again.output_text,
            "first_id": first.id,
        }

    def embeddings_create(tag):
        r = client.embeddings.create(
            model="text-embedding-3-small", input=[f"red apples {tag}", "green pears"]
        )
        return {
            "type": type(r).__name__,
            "vectors": len(r.data),
            "dimensions": len(r.data[0].embedding),
        }

    def completions_create(tag):
        r = client.completions.create(
            model="gpt-3.5-turbo-instruct", prompt=f"Say this is a test {tag}"
        )
        return {"type": type(r).__name__, "text": r.choices[0].text}

    def completions_stream(tag):
        stream = client.completions.create(
            model="gpt-3.5-turbo-instruct", prompt=f"Say this is a test {tag}", stream=True
        )
        return {"chunks": [c.choices[0].text for c in stream if c.choices[0].text]}

    case("embeddings_create", embeddings_create)
    case("completions_create", completions_create)
    case("completions_stream", completions_stream)
    case("responses_text", responses_text)
    case("responses_mended", responses_mended)
    case("responses_stream_draft", responses_stream_draft)
    case("responses_continued", responses_continued)
    case("responses_stream_text", responses_stream_text)
    case("responses_tool", responses_tool)
    case("responses_stream_tool", responses_stream_tool)
    case("responses_stream_draft_tool", responses_stream_draft_tool)
    case("responses_parse", responses_parse)
    case("chat_parse", chat_parse)
    case("chat_parse_unresolved", chat_parse_unresolved)
    case("chat_stream_unresolved", chat_stream_unresolved(MODEL))
    case("chat_stream_draft_unresolved", chat_stream_unresolved("draft"))
    case("responses_unresolved", responses_unresolved)
    case("responses_stream_unresolved", responses_stream_unresolved(MODEL))
    case("responses_stream_draft_unresolved", responses_stream_unresolved("draft"))


# --- LangChain --------------------------------------------------------------------------------


def langchain_family():
    from langchain_core.tools import tool as lc_tool
    from langchain_openai import ChatOpenAI

    llm = ChatOpenAI(model=MODEL, base_url=API, api_key="sk-test", max_retries=0)

    def draft(**options):
        return ChatOpenAI(model="draft", base_url=API, api_key="sk-test", max_retries=0, **options)

    @lc_tool
    def get_weather(city: str) -> str:
        """The weather in a city."""
        return "12 C"

    def invoke(tag):
        m = llm.invoke(f"Say hello {tag}")
        usage = m.usage_metadata or {}
        return {
            "type": type(m).__name__,
            "text": m.content,
            "finish_reason": m.response_metadata.get("finish_reason"),
            "usage": [usage.get("input_tokens"), usage.get("output_tokens")],
        }

    def stream(tag):
        # LangChain asks for a stream's usage (`stream_options`) unasked only from OpenAI itself.
        counted = ChatOpenAI(
            model=MODEL, base_url=API, api_key="sk-test", max_retries=0, stream_usage=True
        )
        chunks = list(counted.stream(f"Say hello {tag}"))
        usage = sum(chunks[1:], chunks[0]).usage_metadata or {}
        return {
            "chunks": [c.content for c in chunks],
            "usage": [usage.get("input_tokens"), usage.get("output_tokens")],
        }

    def structured(tag):
        person = llm.with_structured_output(Person).invoke(f"Who is Ada? {tag}")
        return {"parsed": person.model_dump(), "type": type(person).__name__}

    def tools(tag):
        m = llm.bind_tools([get_weather]).invoke(f"What is the weather in Oslo? {tag}")
        return {"tool_calls": [{"name": c["name"], "args": c["args"]} for c in m.tool_calls]}

    def responses_api(tag):
        m = ChatOpenAI(
            model=MODEL, base_url=API, api_key="sk-test", max_retries=0, use_responses_api=True
        ).invoke(f"Say hello {tag}")
        return {"type": type(m).__name__, "text": m.text}

    def structured_by_tool(tag):
        # The model is made to call a tool named after the schema (`tool_choice`).
        structured = llm.with_structured_output(Person, method="function_calling")
        person = structured.invoke(f"Who is Ada? {tag}")
        return {"parsed": person.model_dump(), "type": type(person).__name__}

    def structured_by_tool_unresolved(tag):
        structured = llm.with_structured_output(Person, method="function_calling")
        return {"parsed": structured.invoke(f"Break: who is Ada? {tag}").model_dump()}

    responses_llm = ChatOpenAI(
        model=MODEL, base_url=API, api_key="sk-test", max_retries=0, use_responses_api=True
    )

    def responses_api_stream(tag):
        return {"chunks": [c.text for c in responses_llm.stream(f"Say hello {tag}")]}

    def responses_api_structured(tag):
        person = responses_llm.with_structured_output(Person).invoke(f"Who is Ada? {tag}")
        return {"parsed": person.model_dump(), "type": type(person).__name__}

    def responses_api_tools(tag):
        m = responses_llm.bind_tools([get_weather]).invoke(f"What is the weather in Oslo? {tag}")
        return {"tool_calls": [{"name": c["name"], "args": c["args"]} for c in m.tool_calls]}

    def responses_api_unresolved(tag):
        return {"text": responses_llm.invoke(f"Break the contract {tag}").text}

    def streamed_unresolved(chat_model):
        def run(tag):
            return {"chunks": [c.text for c in chat_model.stream(f"Break the contract {tag}")]}

        return run


    def invoke_unresolved(tag):
        return {"text": llm.invoke(f"Break the contract {tag}").content}

    def structured_unresolved(tag):
        person = llm.with_structured_output(Person).invoke(f"Break: who is Ada? {tag}")
        return {"parsed": person.model_dump()}

    def stream_draft(tag):
        # Drafts travel as `reasoning_content`, which is not the answer's content.
        return {"chunks": [c.content for c in draft().stream(f"Mend the answer {tag}")]}

    case("invoke", invoke)
    case("stream_draft", stream_draft)
    case("stream", stream)
    case("structured", structured)
    case("structured_by_tool", structured_by_tool)
    case("structured_by_tool_unresolved", structured_by_tool_unresolved)
    case("tools", tools)
    case("responses_api", responses_api)
    case("responses_api_stream", responses_api_stream)
    case("responses_api_structured", responses_api_structured)
    case("responses_api_tools", responses_api_tools)
    case("responses_api_unresolved", responses_api_unresolved)
    case("responses_api_stream_unresolved", streamed_unresolved(responses_llm))
    case(
        "responses_api_stream_draft_unresolved",
        streamed_unresolved(draft(use_responses_api=True)),
    )
    case("invoke_unresolved", invoke_unresolved)
    case("stream_unresolved", streamed_unresolved(llm))
    case("stream_draft_unresolved", streamed_unresolved(draft()))
    case("structured_unresolved", structured_unresolved)


# --- the OpenAI Agents SDK --------------------------------------------------------------------


def agents_family():
    import openai
    from agents import (
        Agent,
        Runner,
        function_tool,
        set_default_openai_api,
        set_default_openai_client,
        set_tracing_disabled,
    )

    # The model given by name: the SDK's default, the Responses API.
    set_default_openai_client(
        openai.AsyncOpenAI(base_url=API, api_key="sk-test", max_retries=0), use_for_tracing=False
    )
    set_default_openai_api("responses")
    set_tracing_disabled(True)
    cities = []

    @function_tool
    def get_weather(city: str) -> str:
        """The weather in a city."""
        cities.append(city)
        return "12 C"

    agent = Agent(
        name="weather", instructions="Answer briefly.", model=MODEL, tools=[get_weather]
    )

    async def run_tool(tag):
        cities.clear()
        result = await Runner.run(agent, f"What is the weather in Oslo? {tag}")
        kinds = [item.type for item in result.new_items]
        return {"final_output": result.final_output, "cities": list(cities), "items": kinds}

    async def run_streamed(tag):
        cities.clear()
        result = Runner.run_streamed(agent, f"What is the weather in Oslo? {tag}")
        kinds = [event.type async for event in result.stream_events()]
        return {"final_output": result.final_output, "cities": list(cities), "saw": sorted(set(kinds))}

    async def run_structured(tag):
        # `output_type`: the SDK asks for `text.format` (a strict JSON Schema).
        typed = Agent(name="people", instructions="Answer briefly.", model=MODEL, output_type=Person)
        result = await Runner.run(typed, f"Who is Ada? {tag}")
        return {"parsed": result.final_output.model_dump(), "type": type(result.final_output).__name__}

    async def run_unresolved(tag):
        result = await Runner.run(agent, f"Break the contract {tag}")
        return {"final_output": result.final_output}

    def run_streamed_unresolved(model):
        streaming = agent.clone(model=model)

        async def run(tag):
            result = Runner.run_streamed(streaming, f"Break the contract {tag}")
            async for _ in result.stream_events():
                pass
            return {"final_output": result.final_output}

        return run

    case("run_tool", run_tool)
    case("run_streamed", run_streamed)
    case("run_structured", run_structured)
    case("run_unresolved", run_unresolved)
    case("run_streamed_unresolved", run_streamed_unresolved(MODEL))
    case("run_streamed_draft_unresolved", run_streamed_unresolved("draft"))


FAMILIES = {"openai": openai_family, "langchain": langchain_family, "agents": agents_family}
for family in FAMILY.split(","):
    FAMILIES[family]()
