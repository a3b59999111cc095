"""Greedy completions of an exported model with vLLM, as a user would load it (run as a script:
vLLM spawns processes, so ``LLM`` is created under ``__main__``).

    python tests/controlplane/vllm_greedy.py EXPORT_DIR PROMPTS_JSON OUT_JSON MAX_NEW_TOKENS
"""
import json
import sys

if __name__ == "__main__":
    from vllm import LLM, SamplingParams

    path, prompts_file, out_file, max_new = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    prompts = json.loads(open(prompts_file).read())
    llm = LLM(model=path, tokenizer=path, dtype="float32", seed=0, gpu_memory_utilization=0.05, max_model_len=256,
              enforce_eager=True, compilation_config={"mode": 0}, enable_prefix_caching=False)
    outs = llm.generate([{"prompt_token_ids": p} for p in prompts], SamplingParams(max_tokens=max_new, temperature=0.0),
                        use_tqdm=False)
    with open(out_file, "w") as fh:
        json.dump([list(o.outputs[0].token_ids) for o in outs], fh)
