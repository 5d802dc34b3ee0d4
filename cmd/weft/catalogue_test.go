package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/weftml/weft/checkpoint"
	"github.com/weftml/weft/dtype"
)

var update = flag.Bool("update", false, "rewrite the generated docs: docs/bad-inputs.md (-run Catalogue), docs/cli/ (-run CLIReference)")

// badInput is one bad thing a user can hand weft.
type badInput struct {
	what string
	args func(dir string) []string // dir: a scratch folder the case may fill
	env  []string                  // KEY=VALUE set while the case runs (an MPI launcher's)
	// fileLimit, if not 0, is the most bytes the case may write to one
	// file (RLIMIT_FSIZE, as ulimit -f sets it): a full disk.
	fileLimit uint64
}

func writeFile(dir, name string, b []byte) string {
	p := filepath.Join(dir, name)
	os.WriteFile(p, b, 0o644)
	return p
}

var catalogue = []badInput{
	{"an unknown precision", func(string) []string { return []string{"plan", "--precision", "fp9"} }, nil, 0},
	{"conflicting plugins", func(string) []string { return []string{"plan", "--precision", "16-mixed+bf16-mixed"} }, nil, 0},
	{"two storage dtypes for one parameter", func(string) []string { return []string{"plan", "--precision", "bf16-true+16-true"} }, nil, 0},
	{"a malformed per-module rule", func(string) []string { return []string{"plan", "--precision-for", "vision.**"} }, nil, 0},
	{"equally specific rules", func(string) []string {
		return []string{"plan", "--model", "hybrid", "--precision-for", "vision.*=16-mixed", "--precision-for", "*.conv1=bf16-mixed"}
	}, nil, 0},
	{"float16 compute with loss scaling refused", func(string) []string {
		return []string{"plan", "--model", "hybrid", "--precision-for", "vision.**=16-mixed", "--loss-scale", "none"}
	}, nil, 0},
	{"two plugins replacing one Linear's arithmetic", func(string) []string { return []string{"plan", "--precision", "nf4-dq+nf4"} }, nil, 0},
	{"a per-module rule that matches no module", func(string) []string {
		return []string{"plan", "--model", "hybrid", "--precision-for", "nothere.**=16-mixed"}
	}, nil, 0},
	{"a per-module rule whose plugin converts nothing", func(string) []string {
		return []string{"plan", "--model", "cnn", "--precision-for", "head=fp8"}
	}, nil, 0},
	{"a bad jmp policy", func(string) []string { return []string{"plan", "--precision", "params=int8,compute=bfloat16"} }, nil, 0},
	{"an unknown model", func(string) []string { return []string{"plan", "--model", "resnet"} }, nil, 0},
	{"an AdamW beta outside [0, 1)", func(string) []string { return []string{"plan", "--beta2", "1.5"} }, nil, 0},
	{"an unknown strategy", func(string) []string { return []string{"plan", "--strategy", "deepspeed"} }, nil, 0},
	{"zero devices", func(string) []string { return []string{"plan", "--devices", "0"} }, nil, 0},
	{"a missing reference folder", func(string) []string { return []string{"parity", "--refs", "/nonexistent"} }, nil, 0},
	{"an unknown flag", func(string) []string { return []string{"train", "--stepz", "3"} }, nil, 0},
	{"an unknown config key", func(dir string) []string {
		return []string{"train", "--config", writeFile(dir, "run.yaml", []byte("model: {name: gpt}\nstepz: 3\n"))}
	}, nil, 0},
	{"a config that is not YAML", func(dir string) []string {
		return []string{"train", "--config", writeFile(dir, "run.yaml", []byte("model: [gpt\n"))}
	}, nil, 0},
	{"a batch that does not split over the devices", func(dir string) []string {
		return []string{"train", "--batch-size", "15", "--devices", "2", "--out", dir}
	}, nil, 0},
	{"strategy single on two devices", func(dir string) []string {
		return []string{"train", "--devices", "2", "--out", dir}
	}, nil, 0},
	{"hsdp on in-process ranks without a shard size", func(dir string) []string {
		return []string{"train", "--strategy", "hsdp", "--devices", "4", "--out", dir}
	}, nil, 0},
	{"an hsdp shard size that does not divide the ranks", func(dir string) []string {
		return []string{"train", "--strategy", "hsdp", "--devices", "4", "--shard-size", "3", "--out", dir}
	}, nil, 0},
	{"sequence parallelism without tensor parallelism", func(dir string) []string {
		return []string{"train", "--sequence-parallel", "--out", dir}
	}, nil, 0},
	{"a context the tensor-parallel ranks cannot share", func(dir string) []string {
		return []string{"train", "--config", writeFile(dir, "run.yaml", []byte("model: {gpt: {layers: 1, width: 32, heads: 2, context: 15}}\n")), "--tp", "2", "--devices", "2", "--sequence-parallel", "--out", dir}
	}, nil, 0},
	{"resume without a checkpoint", func(dir string) []string { return []string{"train", "--resume", "--out", dir} }, nil, 0},
	{"a missing --init-from", func(dir string) []string {
		return []string{"train", "--init-from", filepath.Join(dir, "missing.safetensors"), "--out", dir}
	}, nil, 0},
	{"LoRA under tensor parallelism", func(dir string) []string {
		return []string{"train", "--lora", "blocks.*.qkv", "--tp", "2", "--devices", "2", "--out", dir}
	}, nil, 0},
	{"a checkpoint's latest pointing outside its folder", func(dir string) []string {
		os.MkdirAll(filepath.Join(dir, "checkpoints"), 0o755)
		writeFile(filepath.Join(dir, "checkpoints"), "latest", []byte("../../etc\n"))
		return []string{"train", "--resume", "--out", dir}
	}, nil, 0},
	{"a corrupt manifest", func(dir string) []string {
		ck := filepath.Join(dir, "checkpoints", "step-000010")
		os.MkdirAll(ck, 0o755)
		writeFile(filepath.Join(dir, "checkpoints"), "latest", []byte("step-000010\n"))
		writeFile(ck, "manifest.json", []byte(`{"format":"weft-checkpoint/1","step":-4}`))
		return []string{"train", "--resume", "--out", dir}
	}, nil, 0},
	{"a truncated safetensors file", func(dir string) []string {
		return []string{"inspect", writeFile(dir, "x.safetensors", []byte{0x40, 0, 0, 0, 0, 0, 0, 0, '{'})}
	}, nil, 0},
	{"a safetensors header claiming a huge size", func(dir string) []string {
		return []string{"inspect", writeFile(dir, "x.safetensors", []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0, 0})}
	}, nil, 0},
	{"overlapping tensors", func(dir string) []string {
		h := `{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}}`
		b := append([]byte{byte(len(h)), 0, 0, 0, 0, 0, 0, 0}, h...)
		return []string{"inspect", writeFile(dir, "x.safetensors", append(b, make([]byte, 12)...))}
	}, nil, 0},
	{"a path that does not exist", func(string) []string { return []string{"inspect", "/nonexistent/ckpt"} }, nil, 0},
	{"an unwritable output folder", func(dir string) []string {
		return []string{"train", "--steps", "1", "--out", writeFile(dir, "file", nil) + "/run"}
	}, nil, 0},
	{"sampling a run that does not exist", func(string) []string { return []string{"sample", "--ckpt", "/nonexistent"} }, nil, 0},
	{"an unknown bench", func(string) []string { return []string{"bench", "conv"} }, nil, 0},
	{"a non-integral number for an integer setting", func(dir string) []string {
		return []string{"train", "--config", writeFile(dir, "run.yaml", []byte("model:\n  gpt:\n    width: 64.5\n"))}
	}, nil, 0},
	{"resuming a run that has finished", func(dir string) []string {
		trainCNN(dir)
		return []string{"train", "--model", "cnn", "--steps", "1", "--resume", "--out", dir}
	}, nil, 0},
	{"resuming low-bit optimizer state with float moments", func(dir string) []string {
		trainCNN(dir, "--precision", "bf16-mixed+adamwfp8")
		return []string{"train", "--model", "cnn", "--steps", "2", "--precision", "bf16-mixed", "--resume", "--out", dir}
	}, nil, 0},
	{"resuming a run as another model", func(dir string) []string {
		trainCNN(dir)
		return []string{"train", "--model", "hybrid", "--steps", "2", "--resume", "--out", dir}
	}, nil, 0},
	{"sampling a negative number of characters", func(string) []string { return []string{"sample", "--n", "-5"} }, nil, 0},
	{"sampling at a negative temperature", func(string) []string { return []string{"sample", "--temperature", "-1"} }, nil, 0},
	{"a prompt outside the vocabulary", func(dir string) []string {
		return []string{"sample", "--ckpt", trainedRun(dir, "gpt"), "--prompt", "func é"}
	}, nil, 0},
	{"text for a model that reads none", func(dir string) []string {
		return []string{"train", "--model", "cnn", "--data", writeFile(dir, "a.txt", []byte("text")), "--out", dir}
	}, nil, 0},
	{"a text glob that matches no file", func(dir string) []string {
		return []string{"train", "--data", filepath.Join(dir, "*.txt"), "--out", dir}
	}, nil, 0},
	{"text too short for the context", func(dir string) []string {
		return []string{"train", "--data", writeFile(dir, "a.txt", []byte("a few words")), "--out", dir}
	}, nil, 0},
	{"text and a part of the Go corpus", func(dir string) []string {
		return []string{"train", "--data", writeFile(dir, "a.txt", []byte("text")), "--corpus-part", "net/", "--out", dir}
	}, nil, 0},
	{"a tokenizer without --data", func(string) []string { return []string{"train", "--tokenizer", "gpt2"} }, nil, 0},
	{"an unknown tokenizer", func(dir string) []string {
		return []string{"train", "--data", writeFile(dir, "a.txt", []byte("text")), "--tokenizer", "sentencepiece", "--out", dir}
	}, nil, 0},
	{"a tokenizer folder without GPT-2's files", func(dir string) []string {
		return []string{"train", "--data", writeFile(dir, "a.txt", []byte("text")), "--tokenizer", "gpt2", "--tokenizer-dir", dir, "--out", dir}
	}, nil, 0},
	{"resuming on other text", func(dir string) []string {
		text := []byte(strings.Repeat("some text to train on. ", 40))
		root := newRoot()
		root.SetArgs([]string{"train", "--data", writeFile(dir, "a.txt", text), "--steps", "1", "--batch-size", "4", "--out", dir})
		root.SetOut(io.Discard)
		root.Execute()
		return []string{"train", "--data", writeFile(dir, "b.txt", text), "--steps", "2", "--batch-size", "4", "--resume", "--out", dir}
	}, nil, 0},
	{"in-process ranks under mpirun", func(dir string) []string {
		return []string{"train", "--devices", "2", "--comm", "local", "--out", dir}
	}, []string{"OMPI_COMM_WORLD_SIZE=2"}, 0},
	{"devices that differ from mpirun's processes", func(dir string) []string {
		return []string{"train", "--devices", "3", "--out", dir}
	}, []string{"OMPI_COMM_WORLD_SIZE=2"}, 0},
	{"comm mpi without mpirun", func(dir string) []string {
		return []string{"train", "--devices", "2", "--comm", "mpi", "--out", dir}
	}, nil, 0},
	{"weights overwritten with NaN bytes, inspected", func(dir string) []string {
		return []string{"inspect", corruptRun(dir, "cnn")}
	}, nil, 0},
	{"weights overwritten with NaN bytes, resumed", func(dir string) []string {
		corruptRun(dir, "cnn")
		return []string{"train", "--model", "cnn", "--steps", "2", "--resume", "--out", dir}
	}, nil, 0},
	{"weights overwritten with NaN bytes, sampled", func(dir string) []string {
		return []string{"sample", "--ckpt", corruptRun(dir, "gpt")}
	}, nil, 0},
	{"strategy single on several devices", func(dir string) []string {
		return []string{"train", "--devices", "2", "--out", dir}
	}, nil, 0},
	{"an activation-checkpointing pattern that matches no module", func(dir string) []string {
		return []string{"train", "--activation-checkpointing", "block.*", "--out", dir}
	}, nil, 0},
	{"a comm timeout of zero", func(dir string) []string {
		return []string{"train", "--comm-timeout", "0s", "--out", dir}
	}, nil, 0},
	{"micro-batches that do not split the batch", func(dir string) []string {
		return []string{"train", "--batch-size", "16", "--grad-accum", "3", "--out", dir}
	}, nil, 0},
	{"an unknown learning-rate schedule", func(dir string) []string { return []string{"train", "--lr-schedule", "linear", "--out", dir} }, nil, 0},
	{"a cosine warmup as long as its decay", func(dir string) []string {
		return []string{"train", "--lr-schedule", "cosine", "--warmup-steps", "300", "--out", dir}
	}, nil, 0},
	{"a step schedule without a period", func(dir string) []string {
		return []string{"train", "--config", writeFile(dir, "run.yaml", []byte("optim:\n  lr_schedule: {name: step, gamma: 0.5}\n")), "--out", dir}
	}, nil, 0},
	{"a negative clip value", func(dir string) []string { return []string{"train", "--clip-value", "-1", "--out", dir} }, nil, 0},
	{"clipping by norm and by value", func(dir string) []string {
		return []string{"train", "--clip-norm", "1", "--clip-value", "1", "--out", dir}
	}, nil, 0},
	{"loggers without metrics.jsonl", func(dir string) []string { return []string{"train", "--logger", "csv", "--out", dir} }, nil, 0},
	{"a checkpoint with an optimizer shard missing", func(dir string) []string {
		shardedRun(dir, "1")
		os.Remove(filepath.Join(dir, "checkpoints", "step-000001", "optim-rank-001.safetensors"))
		return append(shardedArgs(dir, "2"), "--resume")
	}, nil, 0},
	{"a checkpoint with an optimizer shard from another run", func(dir string) []string {
		other := filepath.Join(dir, "other")
		shardedRun(dir, "1")
		shardedRun(other, "1", "--seed", "2")
		shard := filepath.Join("checkpoints", "step-000001", "optim-rank-001.safetensors")
		b, _ := os.ReadFile(filepath.Join(other, shard))
		os.WriteFile(filepath.Join(dir, shard), b, 0o644)
		return append(shardedArgs(dir, "2"), "--resume")
	}, nil, 0},
	{"a full disk during a checkpoint", func(dir string) []string {
		shardedRun(dir, "1")
		return append(shardedArgs(dir, "2"), "--resume")
	}, nil, 16 << 10},
	{"an unknown spec argument", func(string) []string { return []string{"plan", "--precision", "bf16-mixed+fp8(margn=1)"} }, nil, 0},
	{"a spec argument that is not a number", func(string) []string { return []string{"plan", "--precision", "fp8(history=long)"} }, nil, 0},
	{"a spec argument out of range", func(string) []string { return []string{"plan", "--precision", "fp8(margin=-1)"} }, nil, 0},
	{"an eval precision over weights training does not store", func(dir string) []string {
		return []string{"train", "--precision", "bf16-mixed", "--eval-precision", "bf16-true", "--out", dir}
	}, nil, 0},
	{"a loss scaler's backoff out of range", func(string) []string { return []string{"plan", "--precision", "16-mixed(backoff_factor=2)"} }, nil, 0},
	{"a spec argument not among its values", func(string) []string { return []string{"plan", "--precision", "fp8(algo=mean)"} }, nil, 0},
	{"a spec argument given twice", func(string) []string { return []string{"plan", "--precision", "fp8(margin=1,margin=2)"} }, nil, 0},
	{"a spec argument without a value", func(string) []string { return []string{"plan", "--precision", "fp8(margin)"} }, nil, 0},
	{"arguments to a spec that takes none", func(string) []string { return []string{"plan", "--precision", "int8(margin=1)"} }, nil, 0},
	{"param_dtype under a strategy that gathers no parameters", func(string) []string {
		return []string{"plan", "--precision", "bf16-mixed(param_dtype=bfloat16)", "--strategy", "ddp", "--devices", "2"}
	}, nil, 0},
	{"param_dtype beside an FP8 recipe's gathers", func(string) []string {
		return []string{"plan", "--precision", "bf16-mixed(param_dtype=bfloat16)+fp8", "--strategy", "fsdp", "--devices", "2"}
	}, nil, 0},
	{"a spec's arguments without the closing parenthesis", func(string) []string { return []string{"plan", "--precision", "fp8(margin=1"} }, nil, 0},
	{"a bad spec argument in a per-module rule", func(string) []string {
		return []string{"plan", "--precision-for", "blocks.*=nf4(block=100)"}
	}, nil, 0},
	{"a bad spec argument in a config", func(dir string) []string {
		return []string{"train", "--config", writeFile(dir, "run.yaml", []byte("precision: {spec: bf16-mixed+fp8(history=0)}\n")), "--out", dir}
	}, nil, 0},
	{"an HF folder whose key/value heads do not divide its heads", func(dir string) []string {
		writeFile(dir, "config.json", []byte(`{"model_type":"llama","vocab_size":128,"hidden_size":64,"num_hidden_layers":1,"num_attention_heads":4,"num_key_value_heads":3,"intermediate_size":128,"max_position_embeddings":64}`))
		return []string{"train", "--init-from", dir, "--out", filepath.Join(dir, "run")}
	}, nil, 0},
	{"an HF folder whose weights lack a tensor", func(dir string) []string {
		writeFile(dir, "config.json", []byte(`{"model_type":"gpt2","vocab_size":98,"n_positions":64,"n_embd":8,"n_head":2,"n_layer":1}`))
		wte := checkpoint.Tensor{Name: "transformer.wte.weight", DType: dtype.F32, Shape: []int{98, 8}, Data: make([]byte, 98*8*4)}
		checkpoint.WriteSafetensors(filepath.Join(dir, "model.safetensors"), []checkpoint.Tensor{wte}, nil)
		return []string{"train", "--init-from", dir, "--out", filepath.Join(dir, "run")}
	}, nil, 0},
	{"an unknown export layout", func(dir string) []string { return []string{"export", "--format", "bert", dir, dir} }, nil, 0},
	{"a run folder another run is training in", func(dir string) []string {
		holdLock(dir, "12345")
		return []string{"train", "--model", "cnn", "--out", dir}
	}, nil, 0},
	{"a fresh run into a folder that holds a run", func(dir string) []string {
		trainCNN(dir)
		return []string{"train", "--model", "cnn", "--steps", "1", "--out", dir}
	}, nil, 0},
	{"overwrite and resume at once", func(dir string) []string { return []string{"train", "--overwrite", "--resume", "--out", dir} }, nil, 0},
	{"resuming from a step that has no checkpoint", func(dir string) []string {
		trainCNN(dir)
		return []string{"train", "--model", "cnn", "--steps", "3", "--resume-from", "7", "--out", dir}
	}, nil, 0},
	{"a corrupt latest checkpoint beside an intact one", func(dir string) []string {
		trainCNN(dir, "--steps", "2", "--save-every", "1")
		nanHead(filepath.Join(dir, "checkpoints", "step-000002", "state.safetensors"))
		return []string{"train", "--model", "cnn", "--steps", "3", "--resume", "--out", dir}
	}, nil, 0},
	{"resuming on another part of the Go corpus", func(dir string) []string {
		trainedRun(dir, "gpt")
		return []string{"train", "--steps", "2", "--batch-size", "4", "--corpus-part", "strings/", "--resume", "--out", dir}
	}, nil, 0},
	{"a warmup under the constant schedule", func(dir string) []string { return []string{"train", "--warmup-steps", "5", "--out", dir} }, nil, 0},
	{"a step-schedule setting under cosine", func(dir string) []string {
		return []string{"train", "--lr-schedule", "cosine", "--lr-gamma", "0.5", "--out", dir}
	}, nil, 0},
	{"checkpoints every 0 steps", func(dir string) []string { return []string{"train", "--save-every", "0", "--out", dir} }, nil, 0},
	{"keeping no checkpoint", func(dir string) []string { return []string{"train", "--keep-last", "0", "--out", dir} }, nil, 0},
	{"consolidating into a folder", func(dir string) []string {
		trainCNN(dir)
		return []string{"consolidate", dir, dir}
	}, nil, 0},
	{"sampling an HF model folder", func(dir string) []string {
		writeFile(dir, "config.json", []byte(`{"model_type":"gpt2"}`))
		return []string{"sample", "--ckpt", dir}
	}, nil, 0},
	{"a batch whose predicted peak does not fit in memory", func(dir string) []string {
		return []string{"train", "--batch-size", "1000000", "--steps", "1", "--out", dir}
	}, nil, 0},
	{"an unknown memory check", func(dir string) []string { return []string{"train", "--memory-check", "maybe", "--out", dir} }, nil, 0},
	{"a misspelt config key", func(dir string) []string {
		return []string{"train", "--config", writeFile(dir, "run.yaml", []byte("precison: bf16-mixed\n")), "--out", dir}
	}, nil, 0},
	{"a config key in another group", func(dir string) []string {
		return []string{"train", "--config", writeFile(dir, "run.yaml", []byte("optim: {lr: 1e-3, batch_size: 8}\n")), "--out", dir}
	}, nil, 0},
	{"a config value of the wrong form", func(dir string) []string {
		return []string{"train", "--config", writeFile(dir, "run.yaml", []byte("optim: {lr_schedule: cosine}\n")), "--out", dir}
	}, nil, 0},
	{"a precision spec with an empty part", func(string) []string { return []string{"plan", "--precision", "bf16-mixed+"} }, nil, 0},
	{"a misspelt precision", func(string) []string { return []string{"plan", "--precision", "bf16-mixd"} }, nil, 0},
	{"stochastic rounding of parameters that are not bfloat16", func(string) []string {
		return []string{"plan", "--precision", "32-true(stochastic_round=true)"}
	}, nil, 0},
	{"an optimizer's precision in a rule for part of the model", func(string) []string {
		return []string{"plan", "--precision", "32-true", "--precision-for", "blocks.*=bf16-mixed+adamw8bit"}
	}, nil, 0},
	{"an HF folder for a model without an HF layout", func(dir string) []string {
		writeFile(dir, "config.json", []byte(`{"model_type":"llama","vocab_size":128,"hidden_size":64,"num_hidden_layers":1,"num_attention_heads":4,"num_key_value_heads":4,"intermediate_size":128,"max_position_embeddings":64}`))
		return []string{"train", "--model", "cnn", "--init-from", dir, "--out", filepath.Join(dir, "run")}
	}, nil, 0},
	{"NaN weights under --on-nan skip", func(dir string) []string {
		return []string{"train", "--config", writeFile(dir, "run.yaml", []byte("model: {gpt: {layers: 1, width: 16, heads: 2, context: 8}}\ndata: {corpus_bytes: 262144, batch_size: 4}\neval: {batches: 1}\n")),
			"--precision", "16-true", "--on-nan", "skip", "--steps", "5", "--save-every", "1000", "--out", dir}
	}, nil, 0},
	{"PEFT export of a run without LoRA adapters", func(dir string) []string {
		trainTinyGPT(dir, "run")
		return []string{"export", "--format", "peft", filepath.Join(dir, "run"), filepath.Join(dir, "peft")}
	}, nil, 0},
	{"exporting a QLoRA run whose --init-from is gone", func(dir string) []string {
		trainTinyGPT(dir, "base")
		trainTinyGPT(dir, "qlora", "--init-from", filepath.Join(dir, "base"), "--precision", "bf16-true+nf4-dq", "--lora", "blocks.*.qkv")
		os.RemoveAll(filepath.Join(dir, "base"))
		return []string{"export", filepath.Join(dir, "qlora"), filepath.Join(dir, "out")}
	}, nil, 0},
}

// holdLock takes run folder dir's lock as a run training in it does, and
// records pid as its holder; the lock lasts as long as the test process.
func holdLock(dir, pid string) {
	f, err := os.OpenFile(filepath.Join(dir, ".weft.lock"), os.O_RDWR|os.O_CREATE, 0o644)
	if err == nil && unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB) == nil {
		f.WriteString(pid + "\n")
	}
	heldLocks = append(heldLocks, f)
}

var heldLocks []*os.File // holdLock's, open until the test process ends

// shardedArgs trains cnn for steps on two ranks under zero1, which writes
// an optimizer shard per rank.
func shardedArgs(dir, steps string, more ...string) []string {
	return append([]string{"train", "--model", "cnn", "--strategy", "zero1", "--devices", "2", "--batch-size", "8", "--steps", steps, "--out", dir}, more...)
}

// shardedRun runs shardedArgs.
func shardedRun(dir, steps string, more ...string) {
	root := newRoot()
	root.SetArgs(shardedArgs(dir, steps, more...))
	root.SetOut(io.Discard)
	root.Execute()
}

// trainedRun trains model one step into dir and returns dir.
func trainedRun(dir, model string) string {
	root := newRoot()
	root.SetArgs([]string{"train", "--model", model, "--steps", "1", "--batch-size", "4", "--out", dir})
	root.SetOut(io.Discard)
	root.Execute()
	return dir
}

// corruptRun trains model one step into dir and overwrites the bytes of
// one weight (head.weight) in its checkpoint with NaNs; it returns dir.
func corruptRun(dir, model string) string {
	trainedRun(dir, model)
	nanHead(filepath.Join(dir, "checkpoints", "step-000001", "state.safetensors"))
	return dir
}

// nanHead overwrites the bytes of head.weight in the checkpoint file state
// with NaNs.
func nanHead(state string) {
	b, _ := os.ReadFile(state)
	if f, err := checkpoint.ParseSafetensors(b); err == nil {
		w, _ := f.Tensor("model.head.weight") // its Data aliases b
		for i := 0; i+4 <= len(w.Data); i += 4 {
			copy(w.Data[i:], []byte{0, 0, 0xc0, 0x7f}) // float32 NaN
		}
	}
	os.WriteFile(state, b, 0o644)
}

// tempName matches the random part of a temporary file's name, which the
// doc shows as *.
var tempName = regexp.MustCompile(`(\.tmp)\d+`)

// machineNumbers matches the numbers of a memory refusal, which depend on
// the machine's memory; the doc shows them as N.
var machineNumbers = regexp.MustCompile(`\d+`)

// TestBadInputCatalogue runs every bad input: each must fail with one line
// that says what was wrong, never a panic; docs/bad-inputs.md lists them
// (go test ./cmd/weft -run Catalogue -update rewrites it).
func TestBadInputCatalogue(t *testing.T) {
	var doc strings.Builder
	doc.WriteString("# What weft answers to bad input\n\nGenerated by `go test ./cmd/weft -run Catalogue -update`; the test fails when this file is stale.\n\n| input | command | exit | answer |\n| --- | --- | --- | --- |\n")
	var bin string // built for the cases that run as a child process
	for _, c := range catalogue {
		dir := t.TempDir()
		args := c.args(dir)
		for _, kv := range c.env {
			k, v, _ := strings.Cut(kv, "=")
			t.Setenv(k, v)
		}
		var msg string
		var code int
		if c.fileLimit != 0 {
			if bin == "" {
				bin = buildWeft(t)
			}
			msg, code = runLimited(t, bin, args, c.fileLimit)
		} else {
			root := newRoot()
			root.SetArgs(args)
			root.SetOut(io.Discard)
			root.SetErr(io.Discard)
			if err := root.Execute(); err != nil {
				msg, code = err.Error(), exitCode(err)
			}
		}
		if code == 0 || strings.Contains(msg, "\n") || strings.Contains(msg, "panic") {
			t.Errorf("%s (weft %s): want a one-line error, got %q (exit %d)", c.what, strings.Join(args, " "), msg, code)
			continue
		}
		shown := strings.ReplaceAll(strings.Join(args, " "), dir, "DIR")
		if len(c.env) > 0 {
			shown = strings.Join(c.env, " ") + " weft " + shown
		} else {
			shown = "weft " + shown
		}
		msg = tempName.ReplaceAllString(strings.ReplaceAll(msg, dir, "DIR"), "${1}*")
		if strings.HasPrefix(msg, "memory: ") {
			msg = machineNumbers.ReplaceAllString(msg, "N")
		}
		fmt.Fprintf(&doc, "| %s | `%s` | %d | %s |\n", c.what, shown, code, strings.ReplaceAll(msg, "|", "\\|"))
		for _, kv := range c.env {
			k, _, _ := strings.Cut(kv, "=")
			os.Unsetenv(k)
		}
	}
	path := "../../docs/bad-inputs.md"
	if *update {
		if err := os.WriteFile(path, []byte(doc.String()), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	if old, err := os.ReadFile(path); err != nil || string(old) != doc.String() {
		t.Errorf("%s is stale: run go test ./cmd/weft -run Catalogue -update", path)
	}
}

// runLimited runs weft (bin) as a child process whose files may grow to
// at most limit bytes (ulimit -f): a full disk for that process alone, not
// for the test binary's own output. It returns the error weft printed and
// the exit status.
func runLimited(t *testing.T, bin string, args []string, limit uint64) (string, int) {
	t.Helper()
	cmd := exec.Command("bash", append([]string{"-c", fmt.Sprintf(`ulimit -f %d && exec "$0" "$@"`, limit/1024), bin}, args...)...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	err := cmd.Run()
	var exit *exec.ExitError
	if !errors.As(err, &exit) {
		t.Fatalf("weft %s: %v", strings.Join(args, " "), err)
	}
	return strings.TrimPrefix(strings.TrimSpace(stderr.String()), "weft: "), exit.ExitCode()
}

// trainTinyGPT trains a tiny gpt for 2 steps into dir/name.
func trainTinyGPT(dir, name string, more ...string) {
	root := newRoot()
	root.SetArgs(append([]string{"train", "--config", writeFile(dir, "tiny.yaml", []byte(tinyLoRARun)), "--steps", "2", "--out", filepath.Join(dir, name)}, more...))
	root.SetOut(io.Discard)
	root.Execute()
}

// trainCNN trains the cnn for one step (unless more says otherwise) into
// the run folder dir.
func trainCNN(dir string, more ...string) {
	root := newRoot()
	root.SetArgs(append([]string{"train", "--model", "cnn", "--steps", "1", "--out", dir}, more...))
	root.SetOut(io.Discard)
	root.Execute()
}
