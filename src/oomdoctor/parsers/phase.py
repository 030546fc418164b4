"""Where in the job the failure happened: phase, step, epoch, and named markers.

The traceback decides first, because titles and progress lines lie ("evaluation OOM"
threads that die while loading the model). Saving, loading, evaluation and data loading
are recognised anywhere in the stack (their frames wrap the training code); the
training-step phases (optimizer step, backward, forward) are read from the innermost
frame outwards (``stack_phase.py`` reads the frames). Without a traceback (host kills),
an error's own hint (a TensorFlow node or op, an XLA operator, a Keras layer) or the last
progress marker before the failure decides. Markers are also exposed by name for the
knowledge base.
"""
from __future__ import annotations

import bisect
from typing import Optional

import regex as re

from ..facts.derived import HOST_KINDS, MARKER_PHASE, primary_event
from ..facts.models import Frame
from ..read.patterns import lazy
from .base import ParseContext
from .lookalikes import NAN_LOSS
from .runtime import BATCH_RETRY_FORMAT, DEVICE_MAP_REFUSED_WORDS
from .stack_phase import _GENERATE_CONFIG, _GENERATION, _frame_text, phase_from_frames
from .torch_alloc import RETRIED_FORMAT
from .traceback import ARROW, RICH_CODE, frames_for, rich_code

# a progress bar named for the evaluation pass: "Val:  21%|███" (its name and colon)
_EVAL_BAR_NAMES = ("Val", "Valid", "Validation", "Validating", "Eval", "Evaluation")
_EVAL_BAR = r"(?m:^)(?:" + "|".join(_EVAL_BAR_NAMES) + r"):\s+"
_EVAL_BAR_GATES = tuple(name.lower() + ":" for name in _EVAL_BAR_NAMES)
# the YOLO trainers' validation bar, described by the metrics it will print ("Class  Images  Labels
# P  R  mAP@.5 mAP@.5:.95:  75% 24/32", later "Class  Images  Instances  Box(P  R  mAP50  mAP50-95):")
_DETECTION_VAL_BAR = (r"(?m:^)\s*Class\s+Images\s+(?:Labels|Instances|Targets)\b[^\n|]{0,160}?\bmAP(?:@|50)[^\n|]{0,60}?"
                      r":\s+")
_DETECTION_VAL_GATES = ("map@", "map50")

# llama.cpp's and its servers' own reports of a load that failed: the weights ("llama_model_load:
# error loading model: unable to allocate backend buffer") or the context they are served with
# ("llama_new_context_with_model: failed to allocate compute buffers", "exiting due to model loading
# error"); TensorRT-LLM's executor that could not be created ("Executor creation failed due to ...")
_LOAD_FAILED_WORDS = (r"(?<!\b[Nn]o )\berror loading model(?=\s*[:.]|\s*$)|\bexiting due to model loading error\b"
                      r"|\bllama_new_context_with_model: failed to allocate\b|\bExecutor creation failed\b"
                      # (llama.cpp since its rename: "llama_init_from_model: failed to initialize the
                      # context: failed to allocate compute pp buffers"; its server's "load_model:
                      # failed to load model")
                      r"|\bllama_init_from_model: failed to (?:allocate|initialize the context)\b"
                      r"|\bload_model: failed to load model\b")

# a file of weights named where a model is loaded from ("checkpoints/instruct-pix2pix-00-22000.ckpt"):
# the model's weights, not a training run's checkpoint to resume from, whatever its folder is called
_WEIGHT_FILE = r"\.(?:ckpt|safetensors|pth|pt|bin|gguf)\b"

MARKERS = {
    "saving_checkpoint": lazy(
        r"Saving model checkpoint to|Saving checkpoint|Saving the FSDP model checkpoint|Saving (?:the )?(?:\w+ )?model (?:to|checkpoint)"
        r"|Saving (?:LoRA )?adapter|save_pretrained\(|Saving model weights|Saving current state|Saving DeepSpeed|"
        r"Saving checkpoint at \d+ (?:iterations|epochs)|\[Torch\] Saving|saving checkpoint"
        # a checkpoint named for which it is ("Saving latest checkpoint model trained for 3 epochs")
        r"|Saving (?:the )?(?:latest|best|last|final|current|new) (?:model )?checkpoint"
        # latent-diffusion's trainers (and the Stable Diffusion fine-tuners built on them) announce
        # their save so: "Summoning checkpoint." (last.ckpt when the run stops), "Here comes the
        # checkpoint..." (every N steps, often glued to the progress bar it broke into)
        r"|\bSummoning checkpoint\b|Here comes the checkpoint\b"
        # a save's own error report ("Error saving model: CUDA out of memory ...")
        r"|(?<!\bno )(?:error|fail\w{0,4}) (?:while |when )?saving (?:the )?(?:model|checkpoint|weights|adapter)"
        # FSDP warns per tensor it cannot copy while building the full state dict of a save
        r"|Failed to clone\(\) tensor with name", re.I),
    "loading_checkpoint_shards": lazy(r"Loading checkpoint shards|loading weights file|Loading model weights|Instantiating \w+ model under default dtype|Loading base model|load_model_and_tokenizer"
                                      # a trainer quantizing the weights it loaded ("Quantizing Mistral",
                                      # "Quantizing transformer")
                                      r"|(?m:^)Quantizing\b"
                                      # a script building or loading its model, at the start of its message
                                      # or after a bullet, an arrow or a tag ("Building model...", kohya's
                                      # "building U-Net", "=> creating model", "[i] Creating the model...",
                                      # "Loading model from models/ldm/model.ckpt"). Not "finished initializing
                                      # model" nor another report that it is done, not Megatron's "initializing
                                      # model parallel", not a resume's "Loading model from checkpoint-500"
                                      # (the resuming marker's)
                                      r"|(?m:^)[\s=>*#-]{0,4}(?:\[\w{1,4}\]\s{0,2})?(?:[Bb]uilding|[Cc]reating|[Ii]nitializing|[Ii]nstantiating) (?=(?:the |a )?"
                                      r"(?i:model|u-?net|vae|text encoders?)(?![-\w])(?! parallel)"
                                      r"(?![^\n]{0,60}\b(?i:done|finished|completed?|took|succeeded|successfully)\b))"
                                      # ... or announcing the load as the whole message ("Loading model ...",
                                      # "Loading the model...")
                                      r"|(?m:^)\W{0,3}Loading (?:the )?model\s*(?:\.{2,3}|…)?\s*$"
                                      r"|\bLoading (?:the |pretrained |base )?model from (?![^\n]{0,200}(?i:checkpoint)(?!\S{0,200}" + _WEIGHT_FILE + r"))"
                                      # a weight file read by name ("Loading weights [06c50424] from .../model.ckpt",
                                      # the Stable Diffusion web UI's; darknet's "Loading weights from x.conv.74"),
                                      # not a resume's checkpoint
                                      r"|\bLoading weights (?:\[\w{1,64}\] )?from (?![^\n]{0,200}(?i:checkpoint|done|finished|loaded))"
                                      # a conversion or loading script naming the weight file it reads
                                      r"|(?i:processing|reading|converting|loading)\s+\S{0,200}?(?:pytorch_model|model|consolidated)[\w.-]{0,100}\.(?:bin|safetensors|pth)\b"
                                      # an error naming the weight file it was reading ("unable to mmap N
                                      # bytes from file <consolidated.00.pth>", "Unable to load checkpoint from ...")
                                      r"|(?i:load|mmap|read|open)\w{0,10}\b[^\n]{0,40}?\bfrom (?:file )?<?\S{0,200}?(?:pytorch_model|model|consolidated)[\w.-]{0,100}\.(?:bin|safetensors|pth)\b"
                                      # a load's own error report, with the out-of-memory error after it on
                                      # the line ("ERROR: Catch exception when loading model: CUDA out of
                                      # memory ..."; not "error loading model card, skipping")
                                      r"|(?<!\b[Nn]o )(?:[Ee]rror|ERROR|[Ee]xception|[Ff]ail\w{0,4})\s(?:while |when )?loading (?:the )?(?:model|weights)"
                                      r"\s*:[^\n]{0,200}?(?:out of memory|OutOfMemory|OOM\b)"
                                      # vLLM's worker reporting the method it failed in ("Exception in worker
                                      # VllmWorkerProcess while processing method load_model: CUDA out of memory")
                                      r"|(?:while processing|[Ee]rror executing) method '?load_model\b"
                                      # an engine's own report that its load failed (above)
                                      r"|" + _LOAD_FAILED_WORDS
                                      # ONNX Runtime failing to create an inference session from the
                                      # model it was given ("[ONNXRuntimeError] : 6 : RUNTIME_EXCEPTION :
                                      # Exception during initialization: ...")
                                      + r"|\[ONNXRuntimeError\][^\n]{0,80}?Exception during initialization\b"
                                      # transformers refusing the device map of a quantized model it
                                      # is loading (raised in from_pretrained)
                                      + r"|" + DEVICE_MAP_REFUSED_WORDS
                                      # ComfyUI's error dialog naming the node that raised, one that loads
                                      # a model ("Error occurred when executing CheckpointLoaderSimple:",
                                      # "... Echo_LoadModel:", "... DownloadAndLoadFlorence2Model:"; not
                                      # LoadImage's or a video loader's, whose input is data)
                                      + r"|Error occurred when executing \w{0,60}?(?i:load\w{0,40}?(?:model|checkpoint|ckpt|unet"
                                      r"|vae|clip|lora|pipe)|(?:model|checkpoint|ckpt|unet|vae|clip|lora|pipe|controlnet)\w{0,40}?loader)"
                                      r"\w{0,60}:"
                                      # a script's own report that placing its model failed ("Failed to
                                      # move model to device", "Error while moving the model to GPU")
                                      r"|(?i:fail\w{0,4}|error|unable) (?:while |when )?(?:to )?(?:mov|load|plac|transferr?|put)\w{0,4}"
                                      r" (?:the )?models? (?:to|onto) (?:the )?(?i:device|gpu|cuda)\b"),
    # (a banner's "Resuming from checkpoint: False" is a setting that says it does not)
    "resuming": lazy(r"Continuing training from checkpoint|Loading model from \S*checkpoint(?!\S{0,200}" + _WEIGHT_FILE + r")|(?<![Nn]ot )(?<![Nn]o )(?i:r)esuming (?:training )?from(?!(?: ?\w{1,20}){0,3}\s*[:=]\s*(?i:false|none|null|no|0|''|\"\")\s*[,;]?\s*$)|resume_from_checkpoint\s*[:=]\s*(?!None\b|null\b|False\b|''|\"\")\S+|Loading optimizer state|load_checkpoint\("
                     # transformers' DeepSpeed integration, and DeepSpeed reading a ZeRO checkpoint's shards
                     r"|Attempting to resume from|successfully read \d+ ZeRO state_dicts"),
    # the Trainer's closing summary: the final save_model() comes right after it
    "training_completed": lazy(r"'train_runtime':|Training completed\. Do not forget|\*{5} train metrics \*{5}"),
    "running_training": lazy(r"\*{5} Running training \*{5}|Start(?:ing)? training\b|Training started|Epoch\(train\)"
                             # tf.data's shuffle buffer full: the input pipeline hands over batches
                             r"|Shuffle buffer filled\b"
                             # a progress bar named for training ("Train:   3%|█"): training goes on
                             r"|(?m:^)(?:Train|Training):\s+\d{1,3}%\|"
                             # a script announcing the stage by its name alone ("Training", "Training...")
                             r"|(?m:^)\W{0,3}Training\s*(?:\.{2,}|\u2026)?\s*$"),
    "running_evaluation": lazy(r"\*{5} Running Evaluation \*{5}|Running evaluation|Start(?:ing)? evaluation|Epoch\(val\)"
                               # a script's own evaluation stage: "Evaluating bboxes of pts_bbox",
                               # "Initializing nuScenes detection evaluation"
                               r"|(?m:^)Evaluating\b|Initializing \w+(?: \w+)? evaluation\b"
                               # a progress bar named for the evaluation pass, not finished ("Val:  21%|███"),
                               # or whose description says so ("Epoch 15 (validation) acc=1.0:   2%|#4")
                               r"|" + _EVAL_BAR + r"(?!100%)\d{1,3}%\|"
                               r"|(?m:^)[^\n|]{0,80}\((?i:validation|validating|val|eval|evaluation|evaluating)\)[^\n|]{0,300}?:\s+(?!100%)\d{1,3}%\|"
                               # an evaluation's own error report ("Error while evaluating MSMARCO: CUDA out of memory")
                               r"|(?<!\b[Nn]o )(?i:error|fail\w{0,4}) (?:while|when) (?:evaluating|validating)\b"
                               # mmcv's task bar, which its test loops draw ("[>>>>    ] 6/15, 0.6 task/s")
                               # (it draws the bar for other work too, such as a data-preparation script's:
                               # read in a training log, it is the evaluation)
                               r"|(?m:^)\[>*\s*\] (?!(?P<done>\d+)/(?P=done),)\d+/\d+, [\d.]+ task/s"
                               # the YOLO trainers' validation bar, not finished
                               r"|" + _DETECTION_VAL_BAR + r"(?!100%)\d{1,3}%"),
    # ... and finished: its stage is over (a later marker than its own earlier updates)
    "evaluation_finished": lazy(_EVAL_BAR + r"100%\||(?m:^)\[>+\] (?P<n>\d+)/(?P=n), [\d.]+ task/s"
                                + r"|" + _DETECTION_VAL_BAR + r"100%"),
    "running_prediction": lazy(r"\*{5} Running Prediction \*{5}|predict_with_generate\s*[:=]\s*[Tt]rue"),
    "ref_model_created": lazy(r"Created reference model|ref_model\b.*(?:loaded|created)|reference model", re.I),
    "optimizer_init": lazy(r"(?:Before|After) initializing optimizer states|initialize_optimizer_states|Creating .*ZeRO stage \d optimizer"),
    # DeepSpeed building the engine: partitioning (and offloading) the freshly loaded model
    "engine_init": lazy(r"DeepSpeedZeRoOffload initialize|Stage 3 initialize beginning|(?:Before|After) creating fp(?:16|32) partitions"
                              r"|Creating ZeRO Offload|finished initializing model|DeepSpeed Final Optimizer|Before creating fp16 partitions"
                              # ZeRO-3's parameter offload, set up: the last line of its initialisation
                              r"|Parameter Offload: Total persistent parameters"),
    # a launcher, Ray or the shell saying a process ended badly, whatever printed (or not) before
    "process_died": lazy(
        r"ActorDiedError|WorkerCrashedError|RayActorError|OwnerDiedError|died unexpectedly|The actor died"
        r"|Worker exit type: SYSTEM_ERROR|Killing subprocess \d|exits with return code = -?[1-9]|exitcode\s*:\s*-?[1-9]"
        r"|ChildFailedError|terminated with signal SIG|returned non-zero exit status|exited with (?:exit )?code -?[1-9]"
        r"|closed by remote host|core dumped"),
    "preprocessing": lazy(r"(?m)Running tokenizer on dataset|^Preprocess(?:ing)?\b(?!(?: (?:config|function|step|done|finished|completed?|took)\b|:\s*100%))|Converting format of dataset|^Map(?: \(num_proc=\d+\))?:|Tokenizing (?:train|dataset)"
                                r"|Generating (?:train|validation) split|Preprocessing dataset|Packing dataset"
                                # a script reading its training data ("Loading prepared training docs from x.json")
                                r"|Loading (?:\w+ ){0,3}(?:data|datasets?|docs|documents|corpus|samples|examples) from\b"
                                # ... or announcing the load as the whole message ("Loading training data...",
                                # "Loading kaggle dataset..."): not a model's, nor an evaluation's set
                                r"|(?m:^)\W{0,3}Loading (?:(?!(?i:model|checkpoint|weights?|test|val|valid|validation|eval"
                                r"|tokenizer|pretrained)\b)\w+ ){0,2}(?:data|datasets?|images|samples|examples|corpus|features|files)"
                                r"\s*(?:\.{2,}|\u2026)?\s*$"
                                # transformers' example scripts building their feature cache
                                # (run_squad, run_glue, run_language_modeling)
                                r"|(?:Creating|Loading) features from (?:dataset|cached) file|Saving features into cached file"
                                r"|Converting examples to features"
                                # tf.data filling a shuffle buffer, which holds that many elements in memory
                                r"|Filling up shuffle buffer"
                                # a trainer setting up its training data and reading its images into memory
                                # ("Setting up training dataset...", "Caching all 373 images."; not an
                                # evaluation's set, nor one whose set-up says it is done)
                                r"|Setting up (?:the )?(?:train(?:ing)? )?datasets?\b(?![^\n]{0,40}\b(?i:done|finished|complete))"
                                r"|Caching (?:all )?\d+ (?:images|frames|samples)\b"
                                # ... or loading them under a progress bar, not finished ("preloading
                                # images (train):  65%|"); not a model's files or an evaluation's data
                                # ("Loading checkpoint files", "Loading test data")
                                r"|(?m:^)[^\n|]{0,40}?(?:[Ll]oading|[Cc]aching|[Rr]eading)\s"
                                r"(?:(?!(?i:model|checkpoint|weights?|safetensors|test|val|valid|validation|eval)\b)\w+\s)?"
                                r"(?i:images|frames|data|dataset|samples|audio|videos|files)\b[^\n|%]{0,40}:\s+(?!100%)\d{1,3}%\|"
                                # a dataset being mapped, unfinished: datasets' progress bars count
                                # "examples" ("padding:  65% 2207000/3382137 [03:08<01:16, 15381.54 examples/s]")
                                # (tqdm writes a slow rate inverted: "1.50s/examples]")
                                r"|(?<![\d.])(?!100%)\d{1,3}%(?:\|[^|\n]{0,300}\|)?\s*\d{1,12}/\d{1,12} \[[^\]\n]{0,60}"
                                r"(?:examples/s|s/examples)\]"),
}
# Lower-case literals of which every match of the marker holds one (see ParseContext.grep):
# only the lines holding one are searched. Checked against MARKERS by a test.
MARKER_GATES = {
    "saving_checkpoint": ("sav", "failed to clone", "summoning checkpoint", "comes the checkpoint"),
    "loading_checkpoint_shards": ("load", "instantiating", "building", "creating", "initializing",
                                  "processing", "reading", "converting", "mmap", "open",
                                  "quantizing", "executor creation failed", "new_context_with_model: failed",
                                  "init_from_model: failed",
                                  "exception during initialization",
                                  "dispatched on the cpu", "to the disk", "cpu or disk device", "to dispatch this model",
                                  "model to ", "models to ", "model onto ", "models onto "),
    "resuming": ("continuing training", "load", "resum", "zero state_dicts"),
    "training_completed": ("train_runtime", "training completed", "train metrics"),
    "running_training": ("running training", "start", "training", "epoch(train)", "train:",
                         "shuffle buffer filled"),
    "running_evaluation": ("running evaluation", "start", "epoch(val)", "evaluating", "evaluation", "task/s",
                           "(val", "(eval", "validating")
                          + _EVAL_BAR_GATES + _DETECTION_VAL_GATES,
    "evaluation_finished": _EVAL_BAR_GATES + ("task/s",) + _DETECTION_VAL_GATES,
    "running_prediction": ("running prediction", "predict_with_generate"),
    "ref_model_created": ("reference model", "ref_model"),
    "optimizer_init": ("initializing optimizer", "initialize_optimizer", "zero stage"),
    "engine_init": ("deepspeedzerooffload", "initialize beginning", "partitions", "creating zero offload",
                    "finished initializing", "deepspeed final optimizer", "parameter offload"),
    "process_died": ("actordiederror", "workercrashederror", "rayactorerror", "ownerdiederror", "died unexpectedly",
                     "the actor died", "worker exit type", "killing subprocess", "return code", "exitcode",
                     "childfailederror", "terminated with signal", "non-zero exit status", "exited with",
                     "closed by remote host", "core dumped"),
    "preprocessing": ("running tokenizer", "preprocess", "converting format", "map", "tokenizing", "generating",
                      "preprocessing dataset", "packing dataset", "loading ", "features from", "features into",
                      "examples to features", "examples/s", "s/examples", "filling up shuffle buffer", "setting up ",
                      "caching", "reading"),
}
_BAR = lazy(r"(?P<n>\d+)/(?P<m>\d+) \[(?:\d+:)?\d+:\d+")
# a bar's description naming work that is not a training step ("frame loading (JPEG): 100%|...|
# 1581/1581", "Loading checkpoint shards", "Map (num_proc=8)", "Downloading"): its count is of
# frames, shards or examples, not of steps
_SETUP_BAR = lazy(r"(?i)\b(?:load(?:ing)?|download(?:ing)?|fetching|map|tokeniz\w*|pre-?process\w*|generating|filter"
                  r"|saving|extracting|resolving|writing|reading|converting|caching|scanning|copying|uploading|indexing"
                  r"|packing|shuffling|encoding|decoding)\b[^|:]{0,60}:\s{0,3}\d{1,3}%\|[^|]{0,200}\|\s{0,3}$")
# hand-written progress lines: "[epoch 7, it 7990]", "step 1200/5000", "iter: 300", "Epoch 3 Iter 12"
_STEP_TEXT = lazy(r"(?i)\b(?:it|iter|iteration|step|global_step)\s*[=:]?\s*(?P<n>\d+)(?:\s*/\s*(?P<m>\d+))?")
_EPOCH_WORD = lazy(r"(?i)\bepoch\s*[=:]?\s*(?P<e>\d+(?:\.\d+)?)")
_EPOCH_DICT = lazy(r"'epoch':\s*'?(?P<e>\d+(?:\.\d+)?)")
_EPOCH_TEXT = lazy(r"\bEpoch[ :\[]*(?P<e>\d+)(?:\s*/\s*\d+)?[\]\s,:|-]*(?:Iter|Step|step|iter|Batch|batch)?\s*\[?(?P<i>\d+)?")
_PERCENT_AFTER = lazy(r"[\d.]*%")
# a line announcing that an epoch begins ("Starting training step on epoch 3", "Beginning epoch 2"):
# from the second on, one has just ended
_EPOCH_START = lazy(r"(?i)\b(?:start(?:s|ing|ed)?|begin(?:s|ning)?)(?:\s+(?!at\b|after\b|from\b|on\s+epoch)\w+){0,4}"
                    r"\s+(?:on\s+)?epoch\s*[:#]?\s*(?P<e>\d{1,6})\b")
# ... unless the line names a setting, a resume or another stage that starts then
_EPOCH_START_NOT = lazy(r"(?i)(?<![-\w])--[a-z]|resum|evaluat|validat|\btest|sav|warm|decay")
# a variable passed along (resume or not is decided at run time), not a path or True
_RESUME_ARG = lazy(r"resume_from_checkpoint\s*=\s*(?!True\b)[A-Za-z_][\w.]*\s*[,)]")
# (and hand-written loops' "Loss: 0.0367" (pytorch/examples' "Train Epoch: 1 [0/60000 (0%)]\tLoss:
# 2.30"), "train loss is 0.0367")
_LOSS = lazy(r"'loss':|\"loss\":|\b(?i:loss)(?:[=:]|\s+is)\s*-?\d|Loss \d")
# ... and a loss named for its split or its part, as Lightning's bars print it ("train_loss=0.52")
_NAMED_LOSS = lazy(r"\b\w{1,30}_loss\s*[=:]\s*-?\d")
_FRAME_LINE = lazy(r"^\s*File \"")
# the phases of setting a run up, which end once training prints its losses
_SETUP_PHASES = ("model_load", "checkpoint_load")

# a step's own report that it finished, at the start of its line ("Done!", "...Done.", "Done!
# Loaded 75 layers from weights-file", "Loaded", "Model loaded")
_DONE_ALONE = lazy(r"^\W{0,3}(?:(?i:the )?(?i:model|weights|checkpoint)s? )?(?i:done|finished|loaded|completed?)\b")
_DONE_REACH = 3


def _done_below(ctx: ParseContext, i: int) -> bool:
    """A load that said it was done a few lines below its start ("Loading weights from
    darknet53.conv.74..." / " seen 64" / "Done!"): what comes after is no longer the load."""
    return any(len(ctx.lines[j].text) < 120 and ctx.search(_DONE_ALONE, ctx.lines[j].text)
               for j in range(i + 1, min(len(ctx.lines), i + 1 + _DONE_REACH)))


def _markers(ctx: ParseContext) -> None:
    hits: dict[int, list[str]] = {}
    for name, rx in MARKERS.items():
        for i in ctx.grep(rx, MARKER_GATES[name]):
            hits.setdefault(i, []).append(name)
    for i in ctx.lines_with(("poch",)):
        hits.setdefault(i, [])
    seen_epochs: list[float] = []
    # the code line under a frame: "trainer.train(resume_from_checkpoint=checkpoint)" is in
    # every example script's traceback, resuming or not (a load_checkpoint() call is a load)
    code = {fi + 1 for fi in ctx.frame_index}
    # source context that rich and IPython print around a frame's line is code too
    code.update(i for i in ctx.lines_with(("│", "┃", "-> "))
                if RICH_CODE.match(ctx.lines[i].text) or ARROW.match(ctx.lines[i].text))
    for i in sorted(hits):
        ln = ctx.lines[i]
        text = ln.text
        if _FRAME_LINE.match(text):
            continue
        for name in hits[i]:
            if name == "resuming" and _passed_along(text, i in code):
                continue
            if name == "loading_checkpoint_shards" and _done_below(ctx, i):
                continue
            ctx.mark(name, ln)
        if "poch" not in text:
            continue
        m = _EPOCH_DICT.search(text)
        if m and "training_completed" in hits[i]:
            continue  # the closing summary carries the final epoch; it is not a boundary
        if m:
            e = float(m.group("e"))
            if e >= 1 and abs(e - round(e)) < 0.011 and (not seen_epochs or seen_epochs[-1] < e):
                ctx.mark("epoch_boundary", ln)
            seen_epochs.append(e)
            continue
        low = text.lower()
        m = _EPOCH_START.search(text) if ("start" in low or "begin" in low) and not _EPOCH_START_NOT.search(text) else None
        if m:
            e = float(m.group("e"))
            # (counters from 0 or 1: the second epoch's start, or any later one)
            if (seen_epochs and seen_epochs[-1] < e) or (not seen_epochs and e >= 2):
                ctx.mark("epoch_boundary", ln)
            seen_epochs.append(e)
            continue
        m = _EPOCH_TEXT.search(text)
        if m:
            e = float(m.group("e"))
            it = m.group("i")
            # a tqdm bar's "Epoch 2/5:   2%|" is just after epoch 1 ended; "Epoch 1/5:   2%|"
            # is the start of training, not the end of an epoch
            first = 2 if it is not None and _PERCENT_AFTER.match(text, m.end("i")) else 1
            if seen_epochs and e > seen_epochs[-1] or (it is not None and e >= first and int(it) <= 3):
                ctx.mark("epoch_boundary", ln)
            seen_epochs.append(e)


def _passed_along(text: str, code: bool) -> bool:
    """``resume_from_checkpoint=checkpoint`` handed to a call: source code (a traceback's code
    line, or one printed without its frame when ranks' output interleaves: the call's
    parenthesis is on the line), not a message that the run resumes."""
    m = _RESUME_ARG.search(text)
    return m is not None and "load_checkpoint(" not in text and (code or "(" in text[:m.start()])


def _progress_before(ctx: ParseContext, idx: int) -> None:
    ph = ctx.facts.phase
    for j in range(idx, max(-1, idx - 3000), -1):
        text = ctx.lines[j].text
        if _FRAME_LINE.match(text) or text.startswith("    "):
            continue  # code lines name steps and epochs too ("for step in ...")
        if ph.step is None:
            bars = [b for b in _BAR.finditer(text) if not _SETUP_BAR.search(text, max(0, b.start() - 300), b.start())]
            if bars:
                ph.step, ph.total_steps = int(bars[-1].group("n")), int(bars[-1].group("m"))
            else:
                m = _STEP_TEXT.search(text)
                if m and ("epoch" in text.lower() or "loss" in text.lower() or m.group("m")):
                    ph.step = int(m.group("n"))
                    ph.total_steps = int(m.group("m")) if m.group("m") else None
        if ph.epoch is None:
            m = _EPOCH_DICT.search(text) or (_EPOCH_WORD.search(text) if ph.step is not None else None)
            if m:
                ph.epoch = float(m.group("e"))
        if ph.step is not None and ph.epoch is not None:
            break


def _failure_anchor(ctx: ParseContext) -> tuple[Optional[int], Optional[int]]:
    """(line number, rank) of the failure the report is about."""
    ev = primary_event(ctx.facts)
    if ev is not None and not ev.survived:
        return ev.line, (ev.ranks[0] if ev.ranks else None)
    prim = [f for f in ctx.facts.failures if not f.secondary]
    if prim:
        f = min(prim, key=lambda f: f.line)
        idx = ctx.index_of(f.line)
        return f.line, (ctx.lines[idx].rank if idx is not None else None)
    return None, None


# lines that say the job went on: a loss, a progress bar, a new training/evaluation run
_GOING_ON_GATE = ("loss", "it/s", "s/it", "running training", "running evaluation", "start")


def _progress_after_traceback(ctx: ParseContext) -> None:
    """Mark the first sign of progress after the last traceback's last frame: that
    traceback was logged and survived (a warning's stack, a retried download), so it is
    not a process that died mid-traceback with its error line lost."""
    if not ctx.frame_index:
        return
    last = ctx.frame_index[-1]
    going_on = {n for name in ("running_training", "running_evaluation") for n in ctx.facts.markers.get(name, [])}
    for i in ctx.lines_with(_GOING_ON_GATE, fold=True):
        if i <= last:
            continue
        ln = ctx.lines[i]
        text = ln.text
        if _FRAME_LINE.match(text) or text.startswith("    "):
            continue
        if ln.no in going_on or ctx.search(_LOSS, text) or ctx.search(_BAR, text):
            ctx.mark("progress_after_traceback", ln)
            return


# said right after a caught OOM by code that goes on (fairseq, batch-size finders)
_RECOVERY = lazy(r"(?i)recover(?:ing|ed)? from|attempting to recover|retry(?:ing)?\b|reduc\w* (?:the )?batch size"
                       r"|decreas\w* (?:the )?batch size|skipping (?:this )?batch|trying (?:a )?(?:smaller )?batch size")
# exceptions that only wrap another process's failure, or follow from it (a rank torn down)
_WRAPPING = lazy(r"(?i)ChildFailedError|CalledProcessError|RemoteTraceback|RayTaskError|out of memory|OutOfMemory"
                       r"|RESOURCE_EXHAUSTED|OOM when allocating|KeyboardInterrupt|SignalException|got signal"
                       r"|DistStoreError|DistBackendError|DistNetworkError|Connection (?:closed|reset) by peer"
                       r"|NCCL|ProcessGroup|timed out|Timeout|Broken pipe|EOFError")


def _survived_events(ctx: ParseContext) -> None:
    """Mark the OOM events the run went on after. Two signs of going on (a logged loss, a
    new training or evaluation run, the end-of-training summary) after the event are
    needed, and one of: a recovery message right after it, the end-of-training summary, or
    a later, different fatal exception. Progress lines alone are not enough: stdout
    buffered in a pipe reaches the log after an unbuffered traceback."""
    events = [e for e in ctx.facts.oom_events if e.kind not in ("host_oom_killer", "dataloader_killed")]
    if not events:
        return
    markers = ctx.facts.markers
    runs = sorted(n for name in ("running_training", "running_evaluation", "training_completed")
                  for n in markers.get(name, []))
    completed = markers.get("training_completed", [])
    losses = [ctx.lines[i].no for i in ctx.lines_with(("loss",), fold=True)
              if ctx.search(_LOSS, ctx.lines[i].text) and not _FRAME_LINE.match(ctx.lines[i].text)]
    going_on = sorted(set(runs) | set(losses))
    fatal = [f.line for f in ctx.facts.failures if f.kind == "python_exception" and not _WRAPPING.search(f.message)]
    # whether each event's traceback ran up to <module> (that process ended), asked once
    top = {id(e): _reached_top(ctx, e) for e in events}
    last_top = max((e.line for e in events if top[id(e)]), default=None)
    for ev in events:
        end = max([ev.line] + [e.line for e in ev.evidence])
        if top[id(ev)]:
            continue   # the exception reached the top of the script: that process ended
        if last_top is not None and last_top > end and _recovered(ctx, ev, None):
            # caught, a recovery said so, and the same run failed again later with an OOM
            # that did end it (a batch-size finder's first try)
            ev.survived = True
            continue
        after = [n for n in going_on if n > end]
        if len(after) < 2:
            continue
        if ev.kind == "nccl" and ev.exception is None and not any(f.line > end for f in ctx.facts.failures):
            # NCCL's own WARN lines, and no exception after them: NCCL hands a failed call back
            # to its caller, which raises ("NCCL error: unhandled cuda error"); nothing did, and
            # the run went on (a bootstrap allocation retried, a transport that fell back)
            ev.survived = True
            continue
        # an allocator's warning is followed by its own retry: the run going on says it worked
        recovered = ev.message_format in (RETRIED_FORMAT, BATCH_RETRY_FORMAT) or _recovered(ctx, ev, after[0])
        later_fatal = any(n > after[1] for n in fatal)
        if recovered or later_fatal or any(n > end for n in completed):
            ev.survived = True


def _recovered(ctx: ParseContext, ev, before: Optional[int]) -> bool:
    """A recovery message within 80 lines after the event (and before line ``before``): the
    recovery comes before the run goes on (a memory summary may sit between)."""
    idx = ctx.index_of(ev.line)
    return idx is not None and any(
        ctx.search(_RECOVERY, ln.text) for ln in ctx.lines[idx:idx + 80] if before is None or ln.no < before)


def _reached_top(ctx: ParseContext, ev) -> bool:
    """Does the traceback printed just before this event's message run up to ``<module>``?"""
    idx = ctx.index_of(ev.line)
    if idx is None:
        return False
    h = bisect.bisect_right(ctx.tb_headers, idx)
    if not h or idx - ctx.tb_headers[h - 1] > 600:
        return False
    header = ctx.tb_headers[h - 1]
    rank = ev.ranks[0] if ev.ranks else None
    # the frames between that header and the event (frame_index is in line order)
    lo, hi = bisect.bisect_left(ctx.frame_index, header), bisect.bisect_right(ctx.frame_index, idx)
    for fr, li in zip(ctx.all_frames[lo:hi], ctx.frame_index[lo:hi]):
        if fr.function == "<module>" and (rank is None or ctx.lines[li].rank in (None, rank)):
            return True
    return False


def _generation(ctx: ParseContext, frames: list[Frame]) -> None:
    """The marker "generation": the failure's traceback is in a generation loop, or the run's
    configuration says its evaluation generates."""
    for fr in frames:
        if _GENERATION.search(_frame_text(fr)):
            ctx.mark("generation", ctx.index_of(fr.line) or 0)
            return
    for i in ctx.grep(_GENERATE_CONFIG, ("predict_with_generate",)):
        ctx.mark("generation", ctx.lines[i])
        return


def parse(ctx: ParseContext) -> None:
    _markers(ctx)
    _survived_events(ctx)
    _progress_after_traceback(ctx)
    line, rank = _failure_anchor(ctx)
    ph = ctx.facts.phase
    if line is None:
        if not ctx.all_frames:
            # no failure line at all (a log cut short, a silent kill): the last progress
            # marker before the end says where the job was
            if ctx.lines:
                _phase_from_markers(ctx, ctx.lines[-1].no, within=50)
                if ph.phase is None and not ctx.facts.oom_events and (hint := _kernel_hint(ctx, len(ctx.lines) - 1)):
                    ph.phase, ph.line, ph.reason = hint
            if ctx.facts.markers.get("process_died"):
                ph.stops_early = "process_died"
            return
        # a traceback whose final error line was cut off when the log was pasted: its
        # innermost frame still says where the job was
        line = ctx.all_frames[-1].line
        rank = ctx.lines[ctx.frame_index[-1]].rank
        if not ctx.facts.markers.get("progress_after_traceback"):
            ph.stops_early = "cut_traceback"
    frames = frames_for(ctx, line, rank)
    if not frames and rank is not None:
        frames = frames_for(ctx, line, None)
    ctx.facts.frames = frames
    _generation(ctx, frames)
    idx = ctx.index_of(line) or 0
    _progress_before(ctx, idx)
    ev = primary_event(ctx.facts)
    resumed = _resumed_just_before(ctx, line)
    phase, frame = phase_from_frames(frames, resumed)
    if not phase:
        # several failures (ranks, notebook cells): the first whose traceback tells
        for other in ctx.facts.oom_events:
            if other is ev:
                continue
            phase, frame = phase_from_frames(frames_for(ctx, other.line, None), resumed)
            if phase:
                break
    if not phase:
        # every rank's traceback, on both sides of the error line: the nearest that tells
        for tb in sorted(_tracebacks(ctx), key=lambda t: abs(t[0] - idx)):
            phase, frame = phase_from_frames(tb[1], resumed)
            if phase:
                break
    # no device event: a host-side death, unless what the log shows is a failure that is not
    # memory (a crash, a timeout) and no memory event at all
    host_side = all(e.kind in HOST_KINDS for e in ctx.facts.oom_events) and (
        bool(ctx.facts.oom_events) or not any(not f.secondary for f in ctx.facts.failures))
    boundary = _boundary_just_before(ctx, frames[0].line if frames else line)
    if host_side and boundary is not None and phase not in ("checkpoint_save", "checkpoint_load", "eval", "model_load"):
        # the process died on the host side right as an epoch ended: whatever frame it was
        # in, the boundary (worker re-forks, eval, save at epoch end) is what matters
        ph.phase, ph.line, ph.reason = "epoch_end", boundary, "host-side failure right after an epoch boundary"
    elif ev is not None and ev.kind == "dataloader_killed" and phase not in ("checkpoint_save", "checkpoint_load", "eval",
                                                                               "model_load"):
        # the main process raises a worker's death from wherever it was (a forward frame):
        # the worker was loading data, for the evaluation when its unfinished bar is just above
        if (n := _evaluation_running(ctx, ev.line)) is not None:
            ph.phase, ph.line, ph.reason = "eval", n, "a DataLoader worker was killed while the evaluation ran"
        else:
            ph.phase, ph.line, ph.reason = "data_loading", ev.line, "a DataLoader worker was killed"
    elif phase:
        ph.phase, ph.line = phase, frame.line
        ph.reason = f"frame {frame.function} in {frame.file.rsplit('/', 1)[-1]}"
    elif (named := _named_processes(ctx, idx)):
        phase, frame = named
        ph.phase, ph.line = phase, frame.line
        ph.reason = f"the killed or largest processes run {frame.function}"
    elif ev is None and any(f.kind == "dataloader_worker_crashed" and f.line == line for f in ctx.facts.failures):
        ph.phase, ph.line, ph.reason = "data_loading", line, "a DataLoader worker crashed"
    elif (hint := _message_hint(ctx, idx) or _code_hint(ctx, idx) or _xla_operator_hint(ctx, idx) or _tf_node_hint(ctx, idx)
          or _native_stack_hint(ctx, idx)
          or _keras_layer_hint(ctx, idx)):
        ph.phase, ph.line, ph.reason = hint
    else:
        _phase_from_markers(ctx, line)
        # (an operator's or a kernel's pass is only the step's: an evaluation or a load the markers
        # name holds it; a host-side death is no kernel's)
        if ph.phase is None and (hint := _paddle_op_hint(ctx, idx) or _tf_kernel_file_hint(ctx, idx)
                                 or (None if host_side else _kernel_hint(ctx, idx))
                                 or _nan_loss_hint(ctx, line, idx)):
            ph.phase, ph.line, ph.reason = hint
    markers = [(n, name) for name, ns in ctx.facts.markers.items() for n in ns if n <= line]
    ph.markers = [ctx.evidence(ctx.index_of(n)) for n, _ in sorted(markers)[-5:] if ctx.index_of(n) is not None]
    trained = any(n <= line for n in ctx.facts.markers.get("running_training", []))
    if trained and ph.step in (None, 0) and not any(j < idx for j in ctx.grep(_LOSS, ("loss",))):
        ctx.mark("first_step", ctx.lines[idx])


# Ray names a worker process after the task or actor method it runs ("ray::Critic.
# init_model_from_pretrained", "name=Worker.generate_sequences"): a kill report listing them
# says what the job was doing, as a frame would.
_RAY_PROCESS = lazy(r"\bray::[\w-]{1,100}\.(?P<fn>\w{1,100})|\bname=[\w:-]{1,100}\.(?P<fn2>\w{1,100})[,)]")


def _named_processes(ctx: ParseContext, idx: int, after: int = 15) -> Optional[tuple[str, Frame]]:
    """(phase, frame) from the method names of the processes named on and just after the
    failure line, read as frames (no traceback was printed)."""
    if ctx.all_frames:
        return None
    killed: list[Frame] = []   # the task the kill names ("name=Trainer.update_actor")
    listed: list[Frame] = []   # the processes its report lists ("ray::Worker.generate_sequences")
    for j in range(idx, min(len(ctx.lines), idx + after + 1)):
        text = ctx.lines[j].text
        if "ray::" not in text and "name=" not in text:
            continue
        m = ctx.search(_RAY_PROCESS, text)
        while m and len(killed) + len(listed) < 20:
            fn = m.group("fn") or m.group("fn2")
            if not fn.startswith("__"):
                (listed if m.group("fn") else killed).append(Frame(file="<process>", function=fn, line=ctx.lines[j].no))
            m = ctx.search(_RAY_PROCESS, text, m.end())
    for frames in (killed, listed):
        phase, frame = phase_from_frames(frames)
        if phase:
            return phase, frame
    return None


def _tracebacks(ctx: ParseContext) -> list[tuple[int, list[Frame]]]:
    """(index of the first frame, frames) of every traceback, one per rank that printed it."""
    out: dict[tuple[int, Optional[int]], tuple[int, list[Frame]]] = {}
    for fr, li in zip(ctx.all_frames, ctx.frame_index):
        h = bisect.bisect_right(ctx.tb_headers, li)   # the traceback header before this frame
        key = (h, ctx.lines[li].rank)
        out.setdefault(key, (li, []))[1].append(fr)
    return list(out.values())


_CODE = (
    # a module converting or moving all its parameters (Module.to / cuda / half / bfloat16 run
    # "return self._apply(lambda t: ...)"): the model being placed
    ("model_load", lazy(r"\bself\._apply\(\s*(?:lambda|convert|fn)\b"
                        # ... and the function it applies, Module.to's convert: "return t.to(device,
                        # dtype if t.is_floating_point() or t.is_complex() else None, non_blocking)"
                        r"|\bt\.to\(\s*device,\s*dtype if t\.is_floating_point\(\)"
                        # a pretrained model built from its files (transformers', Keras Hub's presets)
                        # (not a tokenizer's, a config's or a processor's: they load no weights)
                        r"|(?<![\w.])(?![\w.]*(?:Tokenizer|Config|Processor|Extractor)(?:Fast)?\.from_)[\w.]+\.from_(?:pretrained|preset)\(")),
    ("optimizer_step", lazy(r"optimizer\.step\(|exp_avg|zeros_like\(|\.step\(\)")),
    ("backward", lazy(r"\.backward\(|autograd\.grad\(|run_backward\(")),
    ("forward", lazy(r"scaled_dot_product_attention|flash_attn|softmax\(|matmul\(|\bF\.linear\(|functional\.linear\("
                     r"|self\.(?:attn|mlp|lm_head)\(|logits|cross_entropy"
                     # a layer's functional op: activations, convolutions, norms ("result = torch.relu(input)")
                     r"|\b(?:torch|F|functional)\.(?:relu|gelu|silu|sigmoid|tanh|conv[123]d|layer_norm|group_norm"
                     r"|batch_norm|interpolate|embedding|bmm|baddbmm|einsum)\("
                     # PyTorch's own layers: their C ops ("torch._C._nn.upsample_nearest2d("), the second
                     # line of a convolution's or a batch norm's call ("self.padding, self.dilation,
                     # self.groups)", "training, momentum, eps, torch.backends.cudnn.enabled")
                     r"|\btorch\._C\._nn\.\w+\(|\bself\.padding, self\.dilation, self\.groups\b"
                     r"|\btraining, momentum, eps, torch\.backends\.cudnn\.enabled\b"
                     # a call named for the pass ("self.native_tcnn_module.fwd(", "xe_linear.forward_new(";
                     # not a hook run before one, "prepare_forward(", "pre_sub_module_forward_function(");
                     # position embeddings (rotary, ALiBi, complex RoPE); a differentiable rasterizer
                     # drawing ("_C.rasterize_gaussians(*args)")
                     r"|\b(?!\w*(?:pre_|before_|prepare|hook))\w*forward\w*\(|\.fwd\(|\w*rotary_pos_emb\w*\(|rotate_half\("
                     r"|\balibi\w*\s*(?:=(?!=)|\()|view_as_real\(|\brasterize_(?!\w*backward)\w*\(")),
)


def _phase_in(table, text: str, default: Optional[str] = None) -> Optional[str]:
    """The phase of the first (phase, pattern) row of ``table`` whose pattern ``text`` holds."""
    return next((phase for phase, rx in table if rx.search(text)), default)


# the header of a Python warning, which the warnings module follows with the source line that
# raised it ("/x/attention.py:357: UserWarning: 1Torch was not compiled with flash attention.")
_WARNING_HEADER = lazy(r":\d{1,7}: \w{0,40}Warning: ")


# a wrapper's own words around the error it re-raises, naming the pass it ran: nn.DataParallel
# re-raising a replica's failure ("Caught OutOfMemoryError in replica 0 on device 0": each replica
# runs the module's forward), vLLM's worker around its model runner ("Error in model execution")
_MESSAGE_PHASE = (("forward", lazy(r"\bCaught \w{1,80} in replica \d{1,4} on device \d{1,4}|\bError in model execution\b")),)
_MESSAGE_GATES = ("in replica", "in model execution")
_MESSAGE_REACH = 3


def _unless_evaluating(ctx: ParseContext, idx: int, hint: tuple[str, int, str]) -> tuple[str, int, str]:
    """A forward pass a hint names, under an evaluation's unfinished bar: the evaluation's."""
    phase, _line, reason = hint
    if phase == "forward" and (n := _evaluation_running(ctx, ctx.lines[idx].no)) is not None:
        return "eval", n, f"{reason}, while the evaluation ran"
    return hint


def _message_hint(ctx: ParseContext, idx: int) -> Optional[tuple[str, int, str]]:
    """No frame tells, but the error's wrapper says which pass it ran (on the error line or
    the few lines around it, where the wrapper prints its words)."""
    for j in range(max(0, idx - _MESSAGE_REACH), min(len(ctx.lines), idx + _MESSAGE_REACH + 1)):
        text = ctx.lines[j].text
        if any(g in text for g in _MESSAGE_GATES) and (phase := _phase_in(_MESSAGE_PHASE, text)):
            return _unless_evaluating(ctx, idx, (phase, ctx.lines[j].no, f"the error's wrapper: {text.strip()[:60]}"))
    return None


def _code_hint(ctx: ParseContext, idx: int) -> Optional[tuple[str, int, str]]:
    """No frames at all, but the code line printed just above the error says enough."""
    # the error may be a later piece of its physical line (a code line glued before it)
    while idx + 1 < len(ctx.lines) and ctx.lines[idx + 1].no == ctx.lines[idx].no:
        idx += 1
    # IPython marks the line that ran with an arrow, a few context lines above the error, and
    # rich's boxed traceback with "❱" ("│ ❱  629 │   probs = scores.softmax(dim=-1)   │")
    for j in range(idx - 1, max(-1, idx - 12), -1):
        text = ctx.lines[j].text
        arrow = ARROW.match(text) if text.lstrip().startswith("-") else None
        code = arrow.group("code") if arrow else None
        if code is None and "❱" in text and (rich := RICH_CODE.match(text)):
            code = rich_code(rich)
        if code is not None:
            # (the marked line ran; when it says nothing, the context printed around it never ran)
            phase = _phase_in(_CODE, code)
            return (phase, ctx.lines[j].no, f"code line: {text.strip()[:60]}") if phase else None
    for j in range(idx - 1, max(-1, idx - 4), -1):
        text = ctx.lines[j].text.strip().strip("`")
        if not text:
            continue
        if 0 < j < idx - 1 and "Warning" in ctx.lines[j - 1].text and ctx.search(_WARNING_HEADER, ctx.lines[j - 1].text):
            # the source line a Python warning quotes, with the program's own lines after it: it
            # ran before them, not where the error is (right above the error, the call that
            # warned is the one that failed)
            continue
        phase = _phase_in(_CODE, text)
        if phase:
            return phase, ctx.lines[j].no, f"code line: {text[:60]}"
    return None


# XLA names each operation of a compiled program after the JAX transformations it came from:
# "jvp(Model)" is the forward pass that autodiff differentiates, "transpose(jvp(Model))" its
# backward. Only a program that computes gradients has them, so the operators that an XLA
# out-of-memory report lists (its largest allocations, an autotuner's failed buffer) say
# which pass of the training step held the memory.
_XLA_OPERATOR = lazy(r"op_name=\"[^\"\n]{0,300}?(?P<t>transpose\()?jvp\(")


def _after_first(ctx: ParseContext, literals: tuple[str, ...], idx: int, within: int) -> list[int]:
    """The lines holding a literal within reach of the error line: those after it first
    (a report prints what it names below its error), nearest first."""
    hits = [i for i in ctx.lines_with(literals) if abs(i - idx) <= within]
    return sorted(hits, key=lambda i: (i < idx, abs(i - idx)))


# ... and after the function that was compiled ("pjit(generate)/jit(main)/..."): a program
# compiled from a generation or evaluation function (with no jvp: no gradients) evaluates
_XLA_PROGRAM = lazy(r"op_name=\"p?jit\((?P<fn>[\w.]{1,100})\)")
_XLA_EVAL_PROGRAM = lazy(r"^(?:[\w]+\.)?(?:generate|sample|decode|predict|evaluate|eval|infer|inference)(?:$|_)")


def _xla_operator_hint(ctx: ParseContext, idx: int, within: int = 400) -> Optional[tuple[str, int, str]]:
    """No frames name the pass: the first operator that the report names after the error
    line (its largest allocation), else the nearest before it."""
    for i in _after_first(ctx, ("jvp(",), idx, within):
        m = ctx.search(_XLA_OPERATOR, ctx.lines[i].text)
        if m:
            phase = "backward" if m.group("t") else "forward"
            return phase, ctx.lines[i].no, f"XLA operator of the {phase} pass"
    for i in _after_first(ctx, ('op_name="',), idx, within):
        m = ctx.search(_XLA_PROGRAM, ctx.lines[i].text)
        if m:   # the failed program's name, not a later report's
            if _XLA_EVAL_PROGRAM.search(m.group("fn")):
                return "eval", ctx.lines[i].no, f"XLA program compiled from {m.group('fn')}"
            return None
    return None


# Keras names the layer whose call raised ("Exception encountered when calling Softmax.call().",
# Keras 2's "Exception encountered when calling layer 'dense' (type Dense)."): a layer's call is
# the model's forward
_KERAS_LAYER = lazy(r"Exception encountered when calling (?:layer ['\"]?[\w.-]{1,100}['\"]? \(type (?P<t>\w{1,100})\)"
                    r"|(?P<c>[\w.]{1,100})\.call\(\))")


def _keras_layer_hint(ctx: ParseContext, idx: int, within: int = 12) -> Optional[tuple[str, int, str]]:
    for i in _after_first(ctx, ("Exception encountered when calling",), idx, within):
        m = ctx.search(_KERAS_LAYER, ctx.lines[i].text)
        if m:
            return "forward", ctx.lines[i].no, f"Keras layer {m.group('t') or m.group('c')} was being called"
    return None


# TensorFlow names the graph node whose output could not be allocated ("[[{{node
# gradients/Conv2D_23_grad/Conv2DBackpropInput}}]]", "[[Node: fc1/convolution = ..."): its scope
# says which part of the step it belongs to. Backpropagation's nodes live under "gradients/"
# (TensorFlow 2's "gradient_tape/") or end in "_grad"; an optimizer's slots and updates under its
# name; a Saver restoring variables under "save/"; variables' initial values under "Initializer";
# the input pipeline's iterators are data loading; anything else in the model's graph (a scoped
# name) computes its forward.
_TF_NODE = lazy(r"\[\[(?:\{\{)?[Nn]ode:? (?P<name>[\w./-]{1,300})")
_TF_ITERATOR = r"IteratorGetNext|OneShotIterator|MakeIterator"   # the input pipeline's, as a node or an op
_TF_SCOPES = (
    ("backward", lazy(r"(?:^|/)gradients(?:_\d+)?/|(?:^|/)gradient_tape/|_grad/|Backprop")),
    # (BERT's AdamWeightDecayOptimizer names its slots after the variable: ".../kernel/adam_m")
    ("optimizer_step", lazy(r"(?:^|/)(?:Adam|AdamW|Adagrad|Adadelta|RMSProp|Momentum|LAMB|Adafactor|SGD|training)(?:_\d+)?/|/(?:Adam|AdamW)(?:_\d+)?$"
                            r"|/adam_[mv](?:_\d+)?(?:/|$)")),
    ("checkpoint_load", lazy(r"^save(?:_\d+)?/")),
    # (a variable's initial value: graph mode's "Initializer/", eager Keras' "fc1/random_uniform/"
    # for a layer it builds)
    ("model_load", lazy(r"(?:^|/)Initializer/|/Assign$|\w/(?:random_uniform|random_normal|truncated_normal)(?:_\d+)?(?:/|$)")),
    ("data_loading", lazy(_TF_ITERATOR)),
)


# TensorFlow's eager error names the op that failed at its end ("... by allocator GPU_0_bfc
# [Op:StridedSliceGrad]"): a gradient kernel ("...Grad", "Conv2DBackpropFilter") is the backward
# pass, an optimizer's apply op its step, a Keras function traced for predict() or evaluate()
# ("__inference_predict_function_9480", "__inference_test_function_77") evaluation; any other op
# (MatMul, Mul) runs in either pass and says nothing
# (and after it the name scope the op ran in, "[Op:Add] name: fc1_233/random_uniform/", read as a
# graph node's)
_TF_OP = lazy(r"\[Op:(?P<name>[\w.-]{1,200})\](?:\s{0,3}name:\s{0,3}(?P<scope>[\w./-]{1,300}))?")
_TF_OPS = (
    # (not "Conv2DBackpropInput": the forward pass of a transposed convolution runs it too)
    ("backward", lazy(r"^\w*(?:Grad(?:V\d)?|BackpropFilter\w*)$")),
    ("optimizer_step", lazy(r"^(?:Resource)?(?:Sparse)?Apply[A-Z]\w*$")),
    ("eval", lazy(r"^__inference_(?:predict|test)_function_\d+$")),
    ("data_loading", lazy(r"^(?:" + _TF_ITERATOR + r")\w*$")),
)


def _tf_node_hint(ctx: ParseContext, idx: int, within: int = 30) -> Optional[tuple[str, int, str]]:
    """No frames name the pass: the graph node the TensorFlow error names, nearest after it
    (or the eager op it names)."""
    # (Keras prints it after the node's lines and their hints: "\n\n [Op:__inference_predict_function_9480]")
    for i in _after_first(ctx, ("[Op:",), idx, 8):
        m = ctx.search(_TF_OP, ctx.lines[i].text)
        phase = _phase_in(_TF_OPS, m.group("name")) if m else None
        if phase:
            return phase, ctx.lines[i].no, f"TensorFlow op {m.group('name')[:60]}"
        scope = m.group("scope") if m else None
        if scope and (phase := _phase_in(_TF_SCOPES, scope)):
            return phase, ctx.lines[i].no, f"TensorFlow op {m.group('name')[:30]} in {scope[:60]}"
    for i in _after_first(ctx, ("[[Node", "[[node", "{{node"), idx, within):
        m = ctx.search(_TF_NODE, ctx.lines[i].text)
        if not m:
            continue
        name = m.group("name")
        phase = _phase_in(_TF_SCOPES, name)
        # (a node of the model's graph has a scope; "XRTExecute", "sub_2518" are the runtime's or
        # unnamed; an input iterator is the pipeline's whatever its name)
        if phase is None and "/" in name and not name.startswith("XRT"):
            phase = "forward"
        if phase:
            return phase, ctx.lines[i].no, f"TensorFlow node {name[:60]}"
    return None


# TensorFlow's warning before the error names the source file of the kernel that could not get
# its output ("OP_REQUIRES failed at conv_ops_fused_impl.h:663 : RESOURCE_EXHAUSTED: OOM when
# allocating ..."). A convolution's forward kernels are only the forward pass's (its backward runs
# the Conv2DBackprop kernels, of conv_grad_*_ops), the optimizers' apply kernels live in
# training_ops, the random initialisers of new variables in random_op; other kernels (matmul,
# element-wise, batch norm; random_op, which draws dropout's masks as well as new variables) run
# in both passes and say nothing. Only a kernel that ran out (RESOURCE_EXHAUSTED) is the failure's;
# a forward pass under an evaluation's unfinished bar is the evaluation's
_TF_KERNEL_FILE = lazy(r"OP_REQUIRES failed at (?P<file>\w{1,80})\.(?:cc|h):\d{1,6}\s*:\s*(?i:resource[_ ]exhausted)")
_TF_KERNEL_FILES = (
    ("forward", lazy(r"^(?:conv_ops(?:_fused(?:_impl|_float|_half)?|_3d)?|depthwise_conv_op)$")),
    ("optimizer_step", lazy(r"^training_ops$")),
)
_TF_KERNEL_REACH = 40


def _tf_kernel_file_hint(ctx: ParseContext, idx: int) -> Optional[tuple[str, int, str]]:
    """No frame or node names the pass: the kernel file TensorFlow's warning names, the one
    nearest the error (printed above it)."""
    for i in sorted(ctx.lines_with(("OP_REQUIRES failed at",)), key=lambda i: abs(i - idx)):
        if abs(i - idx) > _TF_KERNEL_REACH:
            break
        m = ctx.search(_TF_KERNEL_FILE, ctx.lines[i].text)
        if m and (phase := _phase_in(_TF_KERNEL_FILES, m.group("file"))):
            return _unless_evaluating(ctx, idx, (phase, ctx.lines[i].no, f"TensorFlow kernel {m.group('file')}"))
        if m:
            return None   # (the nearest kernel says nothing: a farther one is another failure's)
    return None


# The GPU code that was running names its pass. A CUDA kernel's device-side assertion prints
# the kernel and its source file before the error surfaces (asynchronously, at whatever later
# call synchronised: the traceback then shows that call, not the kernel): PyTorch names a
# pass's kernels after it ("nll_loss_forward_reduce_cuda_kernel_2d", THCUNN's
# "*_updateOutput_kernel" and "*_updateGradInput_kernel"); an embedding's lookup is index_select
# ("indexSelectLargeIndex" in Indexing.cu) and a loss's range checks live in Loss.cu or
# ClassNLLCriterion.cu, all of the forward pass. TensorFlow's convolution autotuner says which
# pass it tunes ("running auto-tune for Backward-Filter", "... for Convolve").
_KERNEL_LINE = lazy(r"[\\/](?P<file>\w{1,80})\.cu:\d+:\s*(?:void\s+)?(?P<kernel>(?:\w{1,100}::){0,6}\w{1,200})?[^\n]{0,400}?\bblock: \["
                    r"|running auto-tune for (?P<tf>Backward-(?:Filter|Data)|Convolve)\b")
_KERNEL_PHASE = (
    ("backward", lazy(r"(?i:backward)|updateGradInput|^Backward-")),
    ("forward", lazy(r"(?i:forward)|updateOutput|^indexSelect(?:Large|Small)Index$|^Convolve$")),
)
_LOSS_KERNEL_FILES = ("Loss", "ClassNLLCriterion", "SpatialClassNLLCriterion")


def _kernel_hint(ctx: ParseContext, idx: int, within: int = 8) -> Optional[tuple[str, int, str]]:
    """No frames name the pass: the kernel whose assertion was printed nearest before the
    error (or the convolution pass TensorFlow was tuning)."""
    # (the error's own physical line may hold it, glued after a progress bar: a later piece of it)
    no = ctx.lines[idx].no if ctx.lines else None
    hits = [i for i in ctx.lines_with(("block: [", "running auto-tune for"))
            if idx - within <= i <= idx or ctx.lines[i].no == no]
    for i in sorted(hits, reverse=True):
        m = ctx.search(_KERNEL_LINE, ctx.lines[i].text)
        if not m:
            continue
        name = m.group("tf") or (m.group("kernel") or "").rsplit("::", 1)[-1]
        phase = _phase_in(_KERNEL_PHASE, name) if name else None
        if phase is None and m.group("file") in _LOSS_KERNEL_FILES:
            phase = "forward"
        if phase:
            what = f"TensorFlow tuning {name}" if m.group("tf") else f"CUDA kernel {name or m.group('file') + '.cu'}"
            return phase, ctx.lines[i].no, f"{what} was running"
    return None


# A native stack printed under a C++ failure, innermost first: glog's under a failed CHECK (Caffe,
# and any program built on glog: "*** Check failure stack trace: ***", then "    @ 0x48825f
# caffe::Net<>::ForwardFromTo()") and c10's under an enforce ("frame #3: caffe2::
# UpsampleNearestGradientOp<float, caffe2::CUDAContext>::RunOnDevice() + 0x2b5 (...)"). A solver's
# test pass, snapshot or restore anywhere in it names the phase; else the innermost frame of a
# pass: a layer's or operator's backward (Caffe2's gradient operators), its forward, the update.
_NATIVE_FRAME = lazy(r"^\s*(?:@\s+(?:0x[0-9a-fA-F]{1,16}|\(nil\))|frame #\d{1,4}:)\s+(?P<sym>[^\n]{1,400})")
_NATIVE_ANYWHERE = (
    ("eval", lazy(r"::Test(?:All)?\(")),
    ("checkpoint_save", lazy(r"::Snapshot\w{0,40}\(")),
    ("checkpoint_load", lazy(r"::Restore\w{0,40}\(|::CopyTrainedLayersFrom\w{0,40}\(")),
)
_NATIVE_STEP = (
    ("backward", lazy(r"::Backward\w{0,40}\(|GradientOp\b")),
    # (Caffe's Net::ForwardBackward is the whole step: no pass of its own)
    ("forward", lazy(r"::Forward(?!Backward)\w{0,40}\(")),
    ("optimizer_step", lazy(r"::(?:ApplyUpdate|ComputeUpdateValue)\(")),
)


def _native_stack_hint(ctx: ParseContext, idx: int, within: int = 12) -> Optional[tuple[str, int, str]]:
    """No frames name the pass: the native stack that starts within reach below the error."""
    end = min(len(ctx.lines), idx + 1 + within)
    start = next((j for j in range(idx + 1, end) if ctx.search(_NATIVE_FRAME, ctx.lines[j].text)), None)
    if start is None:
        return None
    stack: list[tuple[str, int]] = []
    for ln in ctx.lines[start:start + 80]:
        m = ctx.search(_NATIVE_FRAME, ln.text)
        if m is None:
            break
        stack.append((m.group("sym"), ln.no))
    for table in (_NATIVE_ANYWHERE, _NATIVE_STEP):
        for sym, no in stack:
            phase = _phase_in(table, sym)
            if phase:
                return phase, no, f"native frame {sym.split('(')[0][:60]}"
    return None


# Paddle names the operator that could not allocate ("W0810 operator.cc:242] mul raises an exception
# paddle::memory::allocation::BadAlloc"): a gradient operator ("matmul_v2_grad") is the backward
# pass, an optimizer's operator its step, any other the model's forward
_PADDLE_OP = lazy(r"\b(?P<op>\w{1,100}) raises an exception paddle::")
_PADDLE_OPS = (
    ("backward", lazy(r"_grad(?:_grad)?$")),
    ("optimizer_step", lazy(r"^(?:merged_)?(?:adam|adamw|lamb|momentum|lars_momentum|sgd|rmsprop|adagrad|adadelta|adamax)$")),
    ("data_loading", lazy(r"^(?:read|create_py_reader|create_double_buffer_reader)$")),
)


def _paddle_op_hint(ctx: ParseContext, idx: int, within: int = 12) -> Optional[tuple[str, int, str]]:
    """No frames name the pass: the operator Paddle names near the error, nearest after it first."""
    for i in _after_first(ctx, ("raises an exception paddle::",), idx, within):
        m = ctx.search(_PADDLE_OP, ctx.lines[i].text)
        if m:
            op = m.group("op")
            phase = _phase_in(_PADDLE_OPS, op, "forward")
            return phase, ctx.lines[i].no, f"Paddle operator {op[:60]}"
    return None


# the name of a loss an evaluation computes: "eval_loss", "val_loss", "valid loss", "test_loss"
_EVAL_LOSS = lazy(r"(?i:\b(?:eval|val|valid|validation|test)[_ ]?['\"]?)$")


def _nan_loss_hint(ctx: ParseContext, line: int, idx: int) -> Optional[tuple[str, int, str]]:
    """The failure is a loss printed as NaN, and nothing else says where: a loss is the
    output of the forward pass (of the evaluation's, when the loss is named for it), so
    that pass is where the failure shows, whichever step first made it NaN."""
    failures = [f for f in ctx.facts.failures if not f.secondary]
    if not any(f.kind == "nan_loss" and f.line == line for f in failures):
        return None
    if any(f.line > line and f.kind != "nan_loss" for f in failures):
        return None   # the job went on to fail otherwise: that failure's place is not the loss's
    text = ctx.lines[idx].text
    m = ctx.search(NAN_LOSS, text)
    if m is None:
        return None
    evaluation = ctx.search(_EVAL_LOSS, text[max(0, m.start() - 12):m.start() + m.group().lower().find("loss")])
    if evaluation:
        return "eval", line, "the evaluation's loss is NaN"
    return "forward", line, "the loss the forward pass computed is NaN"


def _resumed_just_before(ctx: ParseContext, line: int, within: int = 50) -> bool:
    return any(0 <= line - n <= within for n in ctx.facts.markers.get("resuming", []))


def _boundary_just_before(ctx: ParseContext, line: int, within: int = 8) -> Optional[int]:
    for n in reversed(ctx.facts.markers.get("epoch_boundary", [])):
        if 0 <= line - n <= within:
            return n
    return None


# a load's own report that it failed, printed just under the allocation error it ends on
# (llama.cpp: ggml's "failed to allocate ROCm0 buffer of size N", then "llama_new_context_with_model:
# failed to allocate compute buffers" and "exiting due to model loading error")
_LOAD_FAILED = lazy(_LOAD_FAILED_WORDS)
_LOAD_FAILED_BELOW = 6


def _last_stage_marker(ctx: ParseContext, line: int) -> Optional[tuple[int, str]]:
    """The last progress marker at or before ``line``: its line and name."""
    best: Optional[tuple[int, str]] = None
    for name in MARKER_PHASE:
        for n in ctx.facts.markers.get(name, []):
            if n <= line and (best is None or n > best[0]):
                best = (n, name)
    return best


# how far below an evaluation's unfinished bar a DataLoader worker's death is still its
_EVAL_KILL_REACH = 30


def _evaluation_running(ctx: ParseContext, line: int) -> Optional[int]:
    """The line of an evaluation's unfinished bar (or stage) just above ``line``, when it is the
    last stage marker there, its own line says the stage is not over (no finished bar drawn on
    it), and training printed no loss between them: the evaluation the job was in."""
    last = _last_stage_marker(ctx, line)
    if last is None or last[1] != "running_evaluation" or line - last[0] > _EVAL_KILL_REACH:
        return None
    n = last[0]
    if n in ctx.facts.markers.get("evaluation_finished", ()) or _losses_between(ctx, n, line):
        return None
    return n


def _losses_between(ctx: ParseContext, after: int, before: int) -> bool:
    """Did training print a loss between these two log lines?"""
    lo, hi = ctx.index_of(after), ctx.index_of(before)
    if lo is None or hi is None:
        return False
    return any("loss" in t.lower() and (ctx.search(_LOSS, t) or ctx.search(_NAMED_LOSS, t))
               for t in (ctx.lines[j].text for j in range(lo + 1, hi)))


def _phase_from_markers(ctx: ParseContext, line: int, within: int = 400) -> None:
    """No frames: the last progress marker before the failure decides (or a load's own report
    of its failure just under it)."""
    ph = ctx.facts.phase
    for n in ctx.facts.markers.get("loading_checkpoint_shards", []):
        idx = ctx.index_of(n)
        if line < n <= line + _LOAD_FAILED_BELOW and idx is not None and ctx.search(_LOAD_FAILED, ctx.lines[idx].text):
            ph.phase, ph.line, ph.reason = "model_load", n, "the load's own report of its failure, under the error"
            return
    best = _last_stage_marker(ctx, line)
    if best is None:
        return
    n, name = best
    phase = MARKER_PHASE[name]
    if phase is None:
        return
    # a marker far above the failure says little: training went on after it
    if line - n > within:
        return
    # ... and so does a set-up marker (loading the model or a checkpoint, building the engine)
    # with training's losses printed between it and the failure
    if phase in _SETUP_PHASES and _losses_between(ctx, n, line):
        return
    ph.phase, ph.line, ph.reason = phase, n, f"last marker before the failure: {name.replace('_', ' ')}"
