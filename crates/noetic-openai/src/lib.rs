//! OpenAI-compatible chat-completions provider for noetic (OpenAI, OpenRouter, Ollama, vLLM, llama.cpp).
