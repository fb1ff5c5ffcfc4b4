"""The LLM runner on top of tg_gguf: models built from GGUF metadata, tokenizers, chat templates, generation, the
`tg-llm` CLI and an OpenAI-compatible server. `api` is the contract the parts share."""
