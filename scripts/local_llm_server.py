"""Runs llama.cpp's HTTP server (embedded in the xllamacpp wheel) on one GGUF model until SIGINT or SIGTERM.

Started by scripts/local-llm.sh and by `noetic chat --local`; not meant to be run by hand. The embedded server
ignores SIGTERM, so this launcher turns both signals into a clean shutdown.
"""

import argparse
import signal
import sys
import threading


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--model", required=True, help="path of the .gguf file")
    parser.add_argument("--template", help="path of a Jinja chat template replacing the model's own")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=18080)
    parser.add_argument("--threads", type=int, default=1, help="1 is fastest on a busy 2-core machine")
    parser.add_argument("--ctx", type=int, default=8192, help="context size shared by the parallel slots")
    parser.add_argument("--parallel", type=int, default=2, help="requests decoded at once")
    parser.add_argument("--max-tokens", type=int, default=512, help="default cap on a reply's tokens")
    parser.add_argument("--alias", default="smollm2-135m", help="the model id the server reports")
    args = parser.parse_args()

    import xllamacpp

    params = xllamacpp.CommonParams()
    params.model.path = args.model
    params.model_alias = {args.alias}
    params.hostname = args.host
    params.port = args.port
    params.n_ctx = args.ctx
    params.n_parallel = args.parallel
    # A request without max_tokens would otherwise run on until the context is full.
    params.n_predict = args.max_tokens
    params.cpuparams.n_threads = args.threads
    params.cpuparams_batch.n_threads = args.threads
    params.use_jinja = True
    if args.template:
        with open(args.template, encoding="utf-8") as f:
            params.chat_template = f.read()

    server = xllamacpp.Server(params)
    # After the server starts: it installs signal handlers of its own that stop serving but leave this process
    # running. Ours replace them and end the process.
    stop = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stop.set())
    print(f"listening on {server.listening_address}", flush=True)
    while not stop.wait(1.0):
        pass
    del server
    print("stopped", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
