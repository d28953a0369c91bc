#!/usr/bin/env python3
"""`lilims serve` against the real OpenAI client (the `openai` package).

Starts the server on a free loopback port (--port 0; the port is read from
its first line on stderr) with SmolLM2-135M-Instruct, then: chat, streaming,
json_object and json_schema (validated), tools (auto, required, named,
none), completions, prompt-prefix reuse, 8 concurrent clients (greedy
answers equal to one client's alone), a client that disconnects mid-stream
(its request is cancelled: the server reports nothing running), every bad
request (malformed JSON, wrong types, negative max_tokens, an invalid
schema, an unknown model, a body over 8 MB, a prompt longer than the
context, no or a wrong API key), a full queue (429), and the server healthy
after each.  Exits 77 (ctest: skipped) when python3's openai package or the
model is missing.

usage: test_serve.py LILIMS_BINARY [MODEL.gguf] [unittest args]
"""
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import unittest
import urllib.error
import urllib.request

SKIP = 77
try:
    import openai
except ImportError:
    print("SKIP: the Python package 'openai' is not installed (pip install openai)")
    sys.exit(SKIP)
try:
    import jsonschema
except ImportError:
    jsonschema = None


def default_model():
    """Where tests/test_util.h's smollm2_path() looks."""
    d = os.environ.get("LILIMS_MODEL_DIR") or os.path.join(os.path.expanduser("~"), ".cache/lilims/models")
    return os.path.join(d, "SmolLM2-135M-Instruct.Q4_1.gguf")


LILIMS = sys.argv[1] if len(sys.argv) >= 2 else None
MODEL = sys.argv[2] if len(sys.argv) >= 3 and not sys.argv[2].startswith("-") else default_model()
KEY = "sk-test-lilims"


class Server:
    def __init__(self, *extra):
        self.proc = subprocess.Popen(
            [LILIMS, "serve", "-m", MODEL, "--port", "0", "-t", "2", *extra],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        line = self.proc.stderr.readline()
        m = re.search(r"listening on http://([\d.]+):(\d+)", line)
        if not m:
            self.proc.kill()
            raise RuntimeError("lilims serve did not start: " + line + self.proc.stderr.read())
        self.host, self.port = m.group(1), int(m.group(2))
        self.url = f"http://{self.host}:{self.port}"
        # Drain stderr so the server never blocks on it.
        threading.Thread(target=self.proc.stderr.read, daemon=True).start()

    def client(self, **kw):
        kw.setdefault("api_key", KEY)
        kw.setdefault("max_retries", 0)
        kw.setdefault("timeout", 120)
        return openai.OpenAI(base_url=self.url + "/v1", **kw)

    def raw(self, method, path, body=None, headers=None):
        """(status, parsed JSON or text) of one request."""
        h = {"Authorization": "Bearer " + KEY, "Content-Type": "application/json"}
        h.update(headers or {})
        data = body if isinstance(body, (bytes, type(None))) else body.encode()
        req = urllib.request.Request(self.url + path, data=data, method=method, headers=h)
        try:
            with urllib.request.urlopen(req, timeout=120) as r:
                text = r.read().decode()
                status = r.status
        except urllib.error.HTTPError as e:
            text = e.read().decode()
            status = e.code
        try:
            return status, json.loads(text)
        except ValueError:
            return status, text

    def health(self):
        return self.raw("GET", "/health")

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout=60)


def setUpModule():
    global SERVER
    SERVER = Server("--parallel", "4", "-c", "1024", "--queue", "32", "--api-key", KEY)


def tearDownModule():
    rc = SERVER.stop()
    assert rc == 0, f"lilims serve exited with {rc}"


CHAT = [{"role": "system", "content": "You are a concise assistant."},
        {"role": "user", "content": "Name three colors."}]

TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "Current weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                   "required": ["city"]}}},
         {"type": "function", "function": {
    "name": "open_app", "description": "Open an app on the phone",
    "parameters": {"type": "object", "properties": {"app": {"type": "string",
                                                            "enum": ["camera", "maps", "music"]}},
                   "required": ["app"]}}}]


def check_healthy(test):
    status, body = SERVER.health()
    test.assertEqual(status, 200)
    test.assertEqual(body["status"], "ok")


def validate(instance, schema):
    if jsonschema:
        jsonschema.validate(instance, schema)
        return
    # By hand, for the schema used below.
    assert isinstance(instance, dict)
    for k in schema.get("required", []):
        assert k in instance, k
    for k, v in instance.items():
        t = schema["properties"][k]["type"]
        assert {"string": str, "integer": int, "boolean": bool}[t] is type(v), (k, v)


class Chat(unittest.TestCase):
    def test_models_and_health(self):
        models = SERVER.client().models.list()
        self.assertEqual(len(models.data), 1)
        self.assertEqual(models.data[0].id, os.path.basename(MODEL)[:-5])
        check_healthy(self)

    def test_chat(self):
        r = SERVER.client().chat.completions.create(model=os.path.basename(MODEL)[:-5], messages=CHAT,
                                                    temperature=0, max_tokens=24)
        self.assertEqual(r.object, "chat.completion")
        c = r.choices[0]
        self.assertEqual(c.message.role, "assistant")
        self.assertTrue(c.message.content)
        self.assertIn(c.finish_reason, ("stop", "length"))
        self.assertGreater(r.usage.prompt_tokens, 10)
        self.assertGreater(r.usage.completion_tokens, 0)
        self.assertLessEqual(r.usage.completion_tokens, 24)
        self.assertEqual(r.usage.total_tokens, r.usage.prompt_tokens + r.usage.completion_tokens)

    def test_stream_equals_whole_answer(self):
        cl = SERVER.client()
        whole = cl.chat.completions.create(model=SERVER_MODEL(), messages=CHAT,
                                           temperature=0, max_tokens=20, max_completion_tokens=20)
        parts, finish, usage = [], None, None
        stream = cl.chat.completions.create(model=SERVER_MODEL(), messages=CHAT, temperature=0,
                                            max_tokens=20, stream=True,
                                            stream_options={"include_usage": True})
        for chunk in stream:
            if chunk.usage:
                usage = chunk.usage
            for ch in chunk.choices:
                if ch.delta.content:
                    parts.append(ch.delta.content)
                if ch.finish_reason:
                    finish = ch.finish_reason
        self.assertEqual("".join(parts), whole.choices[0].message.content)
        self.assertEqual(finish, whole.choices[0].finish_reason)
        self.assertEqual(usage.completion_tokens, whole.usage.completion_tokens)

    def test_stream_ends_with_done(self):
        body = json.dumps({"messages": CHAT, "max_tokens": 5, "stream": True})
        status, text = SERVER.raw("POST", "/v1/chat/completions", body)
        self.assertEqual(status, 200)
        events = [e for e in text.split("\n\n") if e.startswith("data: ")]
        self.assertEqual(events[-1], "data: [DONE]")
        first = json.loads(events[0][6:])
        self.assertEqual(first["object"], "chat.completion.chunk")
        self.assertEqual(first["choices"][0]["delta"]["role"], "assistant")

    def test_seed_reproduces(self):
        cl = SERVER.client()
        a = cl.chat.completions.create(model=SERVER_MODEL(), messages=CHAT, temperature=1.0, seed=42, max_tokens=16)
        b = cl.chat.completions.create(model=SERVER_MODEL(), messages=CHAT, temperature=1.0, seed=42, max_tokens=16)
        self.assertEqual(a.choices[0].message.content, b.choices[0].message.content)

    def test_stop_string(self):
        r = SERVER.client().chat.completions.create(
            model=SERVER_MODEL(), messages=[{"role": "user", "content": "Count from 1 to 10, comma separated."}],
            temperature=0, max_tokens=40, stop=[","])
        self.assertNotIn(",", r.choices[0].message.content)
        self.assertEqual(r.choices[0].finish_reason, "stop")

    def test_json_object(self):
        r = SERVER.client().chat.completions.create(
            model=SERVER_MODEL(), messages=[{"role": "user", "content": "Describe a cat as JSON."}],
            temperature=0, max_tokens=80, response_format={"type": "json_object"})
        self.assertIsInstance(json.loads(r.choices[0].message.content), dict)

    def test_json_schema(self):
        schema = {"type": "object",
                  "properties": {"name": {"type": "string"}, "age": {"type": "integer"},
                                 "student": {"type": "boolean"}},
                  "required": ["name", "age", "student"], "additionalProperties": False}
        for stream in (False, True):
            kw = dict(model=SERVER_MODEL(), temperature=0, max_tokens=100,
                      messages=[{"role": "user", "content": "Invent a person."}],
                      response_format={"type": "json_schema",
                                       "json_schema": {"name": "person", "schema": schema, "strict": True}})
            if stream:
                text = "".join(c.choices[0].delta.content or "" for c in
                               SERVER.client().chat.completions.create(stream=True, **kw) if c.choices)
            else:
                text = SERVER.client().chat.completions.create(**kw).choices[0].message.content
            value = json.loads(text)
            validate(value, schema)

    def test_tools(self):
        cl = SERVER.client()
        msgs = [{"role": "user", "content": "What's the weather in Paris?"}]
        for choice in ("required", {"type": "function", "function": {"name": "open_app"}}):
            r = cl.chat.completions.create(model=SERVER_MODEL(), messages=msgs, tools=TOOLS,
                                           tool_choice=choice, temperature=0, max_tokens=120)
            c = r.choices[0]
            self.assertEqual(c.finish_reason, "tool_calls", c)
            call = c.message.tool_calls[0]
            self.assertEqual(call.type, "function")
            self.assertIn(call.function.name, ("get_weather", "open_app"))
            if isinstance(choice, dict):
                self.assertEqual(call.function.name, "open_app")
                self.assertIn(json.loads(call.function.arguments)["app"], ("camera", "maps", "music"))
            else:
                self.assertIsInstance(json.loads(call.function.arguments), dict)
        # auto: text or calls, well formed either way; none: text.
        r = cl.chat.completions.create(model=SERVER_MODEL(), messages=msgs, tools=TOOLS, tool_choice="auto",
                                       temperature=0, max_tokens=120)
        c = r.choices[0]
        if c.finish_reason == "tool_calls":
            for call in c.message.tool_calls:
                json.loads(call.function.arguments)
        else:
            self.assertIsInstance(c.message.content, str)
        r = cl.chat.completions.create(model=SERVER_MODEL(), messages=msgs, tools=TOOLS, tool_choice="none",
                                       temperature=0, max_tokens=20)
        self.assertIsNone(r.choices[0].message.tool_calls)
        # A streamed call arrives as one tool_calls delta.
        calls = []
        for chunk in cl.chat.completions.create(model=SERVER_MODEL(), messages=msgs, tools=TOOLS,
                                                tool_choice="required", temperature=0, max_tokens=120,
                                                stream=True):
            for ch in chunk.choices:
                calls += ch.delta.tool_calls or []
        self.assertTrue(calls)
        json.loads(calls[0].function.arguments)
        # The conversation goes on with the tool's answer.
        r = cl.chat.completions.create(model=SERVER_MODEL(), temperature=0, max_tokens=20, messages=msgs + [
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": "call_1", "type": "function",
                 "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
            {"role": "tool", "tool_call_id": "call_1", "content": "{\"temp_c\": 21}"}])
        self.assertTrue(r.choices[0].message.content)

    def test_completions(self):
        cl = SERVER.client()
        r = cl.completions.create(model=SERVER_MODEL(), prompt="The capital of France is", max_tokens=8,
                                  temperature=0)
        self.assertEqual(r.object, "text_completion")
        self.assertTrue(r.choices[0].text)
        text = "".join(c.choices[0].text for c in cl.completions.create(
            model=SERVER_MODEL(), prompt="The capital of France is", max_tokens=8, temperature=0, stream=True))
        self.assertEqual(text, r.choices[0].text)

    def test_prefix_reuse(self):
        system = {"role": "system", "content": "You answer questions about the solar system. " * 20}
        cl = SERVER.client()
        cl.chat.completions.create(model=SERVER_MODEL(), temperature=0, max_tokens=4,
                                   messages=[system, {"role": "user", "content": "How many planets?"}])
        r = cl.chat.completions.create(model=SERVER_MODEL(), temperature=0, max_tokens=4,
                                       messages=[system, {"role": "user", "content": "Which is the largest?"}])
        self.assertGreater(r.usage.prompt_tokens_details.cached_tokens, 150)

    def test_eight_concurrent_clients(self):
        questions = ["Name a fruit.", "Name a city.", "Name an animal.", "Name a color.",
                     "Name a planet.", "Name a tree.", "Name a river.", "Name a song."]
        alone = {}
        for q in questions[:2]:
            alone[q] = SERVER.client().chat.completions.create(
                model=SERVER_MODEL(), messages=[{"role": "user", "content": q}], temperature=0,
                max_tokens=24).choices[0].message.content
        results, errors = {}, []

        def one(i, q):
            try:
                cl = SERVER.client()
                if i % 2:
                    text = "".join(c.choices[0].delta.content or "" for c in cl.chat.completions.create(
                        model=SERVER_MODEL(), messages=[{"role": "user", "content": q}], temperature=0,
                        max_tokens=24, stream=True) if c.choices)
                else:
                    text = cl.chat.completions.create(model=SERVER_MODEL(), messages=[{"role": "user", "content": q}],
                                                      temperature=0, max_tokens=24).choices[0].message.content
                results[q] = text
            except Exception as e:  # noqa: BLE001 - reported below
                errors.append(repr(e))

        threads = [threading.Thread(target=one, args=(i, q)) for i, q in enumerate(questions)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self.assertEqual(errors, [])
        self.assertEqual(len(results), 8)
        for q, text in alone.items():
            self.assertEqual(results[q], text, q)  # batched greedy == alone
        check_healthy(self)

    def test_disconnect_mid_stream_cancels(self):
        body = json.dumps({"messages": [{"role": "user", "content": "Write a very long story."}],
                           "max_tokens": 900, "temperature": 0, "stream": True,
                           "stop": ["THE END OF EVERYTHING"]}).encode()
        s = socket.create_connection((SERVER.host, SERVER.port))
        s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + KEY.encode() +
                  b"\r\nContent-Type: application/json\r\nContent-Length: " + str(len(body)).encode() +
                  b"\r\n\r\n" + body)
        got = b""
        while got.count(b"data: ") < 4:
            got += s.recv(4096)
        self.assertIn(b"200 OK", got)
        s.close()
        # The request ends soon after its stream breaks: nothing runs.
        deadline = time.time() + 30
        while time.time() < deadline:
            status, h = SERVER.health()
            if h["running"] == 0 and h["queued"] == 0:
                break
            time.sleep(0.05)
        self.assertEqual((h["running"], h["queued"]), (0, 0))
        check_healthy(self)


def SERVER_MODEL():
    return os.path.basename(MODEL)[:-5]


class BadRequests(unittest.TestCase):
    def expect(self, status, body, code=None, param=None, path="/v1/chat/completions", headers=None):
        got, err = SERVER.raw("POST", path, body, headers)
        self.assertEqual(got, status, (body[:200] if isinstance(body, str) else "", err))
        self.assertIsInstance(err, dict, err)
        e = err["error"]
        self.assertTrue(e["message"])
        self.assertIn("type", e)
        if code:
            self.assertEqual(e["code"], code, e)
        if param:
            self.assertEqual(e["param"], param, e)
        check_healthy(self)

    def test_malformed_json(self):
        self.expect(400, '{"messages": [', "invalid_json")
        self.expect(400, "[1, 2]", "invalid_json")
        self.expect(400, "", "invalid_json")

    def test_wrong_types(self):
        ok = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
        for field, value in [("messages", "hi"), ("temperature", "hot"), ("max_tokens", "5"), ("stream", "yes"),
                             ("top_p", [1]), ("stop", 5), ("seed", 1.5), ("tools", {}), ("n", "1"),
                             ("response_format", "json")]:
            self.expect(400, json.dumps(dict(ok, **{field: value})), param=field)
        self.expect(400, json.dumps({"messages": [{"role": 5, "content": "hi"}]}), param="messages[0].role")
        self.expect(400, json.dumps({"messages": [{"role": "user", "content": 5}]}), param="messages[0].content")
        self.expect(400, json.dumps({"messages": [{"role": "wizard", "content": "hi"}]}))
        self.expect(400, json.dumps({"messages": []}))
        self.expect(400, json.dumps({}))

    def test_out_of_range(self):
        base = {"messages": [{"role": "user", "content": "hi"}]}
        self.expect(400, json.dumps(dict(base, max_tokens=-1)), "invalid_value", "max_tokens")
        self.expect(400, json.dumps(dict(base, max_completion_tokens=-5)), "invalid_value", "max_completion_tokens")
        self.expect(400, json.dumps(dict(base, temperature=-0.5)), "invalid_value", "temperature")
        self.expect(400, json.dumps(dict(base, top_p=1.5)), "invalid_value", "top_p")
        # Through the client too.
        with self.assertRaises(openai.BadRequestError) as cm:
            SERVER.client().chat.completions.create(model=SERVER_MODEL(), messages=CHAT, max_tokens=-3)
        self.assertEqual(cm.exception.status_code, 400)

    def test_invalid_schema(self):
        base = {"messages": [{"role": "user", "content": "hi"}]}
        self.expect(400, json.dumps(dict(base, response_format={
            "type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "nonsense"}}})),
            "invalid_json_schema")
        self.expect(400, json.dumps(dict(base, response_format={"type": "xml"})), param="response_format.type")
        self.expect(400, json.dumps(dict(base, tools=[{"type": "function", "function": {"parameters": {}}}])),
                    param="tools")

    def test_unknown_model(self):
        with self.assertRaises(openai.NotFoundError) as cm:
            SERVER.client().chat.completions.create(model="gpt-9", messages=CHAT)
        self.assertEqual(cm.exception.status_code, 404)
        self.assertEqual(cm.exception.body["code"], "model_not_found")
        check_healthy(self)

    def test_body_over_8_mb(self):
        big = json.dumps({"messages": [{"role": "user", "content": "a" * (8 * 1024 * 1024 + 10)}]})
        self.expect(413, big, "request_too_large")

    def test_prompt_longer_than_context(self):
        long = json.dumps({"messages": [{"role": "user", "content": "hello " * 1500}]})
        self.expect(400, long, "context_length_exceeded")
        self.expect(400, json.dumps({"prompt": "word " * 1500}), "context_length_exceeded", path="/v1/completions")

    def test_api_key(self):
        for headers in ({"Authorization": ""}, {"Authorization": "Bearer wrong"}):
            got, err = SERVER.raw("POST", "/v1/chat/completions", json.dumps({"messages": CHAT}), headers)
            self.assertEqual(got, 401)
            self.assertEqual(err["error"]["code"], "invalid_api_key")
        with self.assertRaises(openai.AuthenticationError):
            SERVER.client(api_key="nope").models.list()
        check_healthy(self)


class FullQueue(unittest.TestCase):
    def test_429_when_the_queue_is_full(self):
        srv = Server("--parallel", "1", "-c", "512", "--queue", "1")
        try:
            codes, lock = [], threading.Lock()

            def one():
                try:
                    srv.client().chat.completions.create(model=SERVER_MODEL(), max_tokens=60, temperature=0,
                                                         messages=[{"role": "user", "content": "Tell a story."}])
                    code = 200
                except openai.RateLimitError as e:
                    code = e.status_code
                    assert e.body["code"] == "rate_limit_exceeded"
                with lock:
                    codes.append(code)

            threads = [threading.Thread(target=one) for _ in range(5)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            self.assertIn(429, codes)
            self.assertIn(200, codes)
            self.assertEqual(srv.health()[0], 200)
            r = srv.client().chat.completions.create(model=SERVER_MODEL(), messages=CHAT, max_tokens=4)
            self.assertTrue(r.choices[0].message.content)
        finally:
            self.assertEqual(srv.stop(), 0)


if __name__ == "__main__":
    if not LILIMS or not os.path.exists(MODEL or ""):
        print(f"SKIP: the model {MODEL} is missing (scripts/fetch_model.sh)")
        sys.exit(SKIP)
    rest = sys.argv[3:] if len(sys.argv) >= 3 and not sys.argv[2].startswith("-") else sys.argv[2:]
    unittest.main(argv=[sys.argv[0], "-v"] + rest)
