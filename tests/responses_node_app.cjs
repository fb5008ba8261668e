// A Responses API app driven by a test: the official OpenAI Node.js SDK (openai-node), its base
// URL pointed at the server. Run as `node responses_node_app.cjs OPENAI_PACKAGE_DIR BASE REQUEST`:
// `client.responses.stream(REQUEST)` read to its end with the SDK's stream helper, which checks
// that the events read as one response; prints one JSON line, {"events": [EVENT TYPES],
// "final": FINAL RESPONSE} or {"error": MESSAGE} when the helper refused the stream.
const [packageDir, baseURL, request] = process.argv.slice(2);
const OpenAI = require(packageDir);

async function main() {
  const client = new OpenAI({ apiKey: "sk-test", baseURL, maxRetries: 0 });
  const events = [];
  try {
    const stream = client.responses.stream(JSON.parse(request));
    for await (const event of stream) {
      events.push(event.type);
    }
    const final = await stream.finalResponse();
    console.log(JSON.stringify({ events, final }));
  } catch (error) {
    console.log(JSON.stringify({ events, error: String(error && error.message) }));
  }
}

main();
