"""Progress markers that decide a phase: epoch boundaries and resuming from a checkpoint."""
from __future__ import annotations

import pytest

from oomdoctor.read.normalise import normalise
from oomdoctor.parsers import extract

DL_KILLED = """\
Epoch {e}/{n}:   {pct}%|▎         | 1911/63000 [48:30<25:50:11,  1.52s/it, loss=3.412]
Traceback (most recent call last):
  File "/opt/conda/lib/python3.10/site-packages/torch/utils/data/dataloader.py", line 1133, in _try_get_data
    data = self._data_queue.get(timeout=timeout)
RuntimeError: DataLoader worker (pid 40917) is killed by signal: Killed.
"""


def facts(text: str):
    return extract(normalise(text))


def test_a_few_percent_into_the_first_epoch_is_not_an_epoch_end():
    f = facts(DL_KILLED.format(e=1, n=1, pct=3))
    assert "epoch_boundary" not in f.markers
    assert f.phase.phase != "epoch_end"


def test_a_few_percent_into_a_later_epoch_is_just_after_a_boundary():
    f = facts(DL_KILLED.format(e=2, n=5, pct=2))
    assert f.markers.get("epoch_boundary")
    assert f.phase.phase == "epoch_end"


TB = """\
Traceback (most recent call last):
  File "/home/user/run_clm.py", line 601, in main
    {code}
  File "/usr/lib/python3.10/site-packages/transformers/trainer.py", line 1539, in train
    return inner_training_loop(
torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.
"""


def test_the_resume_argument_in_a_traceback_is_not_a_resume():
    f = facts(TB.format(code="train_result = trainer.train(resume_from_checkpoint=checkpoint)"))
    assert "resuming" not in f.markers


def test_the_resume_argument_printed_without_its_frame_is_code_too():
    # ranks' output interleaved: a copy of the code line lands outside its frame, unindented
    f = facts("train_result = trainer.train(resume_from_checkpoint=checkpoint)\n" + TB.format(code="main()"))
    assert "resuming" not in f.markers
    # ... but a configuration dump naming a relative checkpoint is the run's setting
    f = facts("resume_from_checkpoint=last,\n" + TB.format(code="main()"))
    assert f.markers.get("resuming") == [1]


def test_a_checkpoint_load_call_and_a_resume_message_still_are():
    assert facts(TB.format(code="args.iteration = load_checkpoint(model, optimizer, opt_param_scheduler)")).markers.get("resuming")
    logged = "Resuming training from checkpoint-500\n" + TB.format(code="trainer.train(resume_from_checkpoint=checkpoint)")
    assert facts(logged).markers.get("resuming") == [1]


def test_a_checkpoint_path_or_true_on_a_code_line_is_a_resume():
    for arg in ('"out/checkpoint-500"', "True"):
        assert facts(TB.format(code=f"trainer.train(resume_from_checkpoint={arg})")).markers.get("resuming"), arg


def test_a_saves_own_error_report_is_a_save():
    line = ("2023-04-18 20:39:29.054 | INFO     | __main__:savemodel:34 - Error saving model: CUDA out of memory. "
            "Tried to allocate 16.00 MiB (GPU 0; 10.00 GiB total capacity; 9.03 GiB already allocated; 0 bytes free; "
            "9.27 GiB reserved in total by PyTorch)\n")
    f = facts(line)
    assert f.markers.get("saving_checkpoint") and f.phase.phase == "checkpoint_save"
    # ... not a run that goes on after saving, nor a save that worked
    assert not facts("Failed saving time stats to wandb\n").markers.get("saving_checkpoint")


@pytest.mark.parametrize("line, marker, found", [
    ("Epoch 15 (validation) validation/acc/qa=1.000000:   2%|#4      | 20/1094 [00:41<11:04,  1.62it/s]",
     "running_evaluation", True),
    ("  - (Validation) :   0%|          | 0/32 [00:00<?, ?it/s]", "running_evaluation", True),
    # ... a finished one is over
    ("Epoch 15 (validation) validation/acc/qa=1.000000: 100%|#####| 1094/1094 [00:41<00:00,  1.62it/s]",
     "running_evaluation", False),
    ("Error while evaluating MSMARCO: CUDA out of memory. Tried to allocate 93.68 GiB. ...", "running_evaluation", True),
    ("Preprocess Video 474", "preprocessing", True),
    ("Preprocessing 12000 images", "preprocessing", True),
    # ... a preprocessor's settings or a step's name are not preprocessing under way
    ("Preprocessor config saved in out/preprocessor_config.json", "preprocessing", False),
    ("Preprocessing function: default", "preprocessing", False),
    # ... nor one that is over
    ("Preprocessing done", "preprocessing", False),
    ("Preprocessing took 3.1s", "preprocessing", False),
    ("Preprocessing: 100%|####| 500/500 [00:03<00:00, 150.2it/s]", "preprocessing", False),
    # data loaded or cached under an unfinished progress bar; not a finished one, nor the model's shards
    ("preloading images (train):  65%|██████▌   | 65/100", "preprocessing", True),
    ("Reading audio files:   3%|3         | 300/10000 [00:02<01:10, 137.2it/s]", "preprocessing", True),
    ("preloading images (train): 100%|██████████| 100/100", "preprocessing", False),
    ("Loading checkpoint shards:  50%|█████     | 1/2 [00:03<00:03,  3.20s/it]", "preprocessing", False),
    ("Loading checkpoint files:  50%|█████     | 1/2 [00:03<00:03,  3.20s/it]", "preprocessing", False),
    ("Reading safetensors files:  50%|█████     | 1/2", "preprocessing", False),
    ("Loading test data:  50%|█████     | 1/2", "preprocessing", False),
    # ... nor a data split's name on a data bar
    ("Tokenizing (test): 45%|###  | 45/100 [00:01<00:01, 40.1it/s]", "running_evaluation", False),
    # tf.data filling its shuffle buffer (elements held in memory until it is full)
    ("2019-10-28 14:33:17.640610: I tensorflow/core/kernels/data/shuffle_dataset_op.cc:111] Filling up shuffle "
     "buffer (this may take a while): 257 of 2048", "preprocessing", True),
    # ... and full: the pipeline hands over batches, training goes on
    ("2019-10-28 14:33:51.289321: I tensorflow/core/kernels/data/shuffle_dataset_op.cc:162] Shuffle buffer filled.",
     "running_training", True),
    # an evaluation that reports no error; a save that worked
    ("No error while evaluating; all metrics written", "running_evaluation", False),
    ("No error saving model; all shards written", "saving_checkpoint", False),
])
def test_evaluation_and_preprocessing_named_in_other_words(line, marker, found):
    assert bool(facts(line + "\n").markers.get(marker)) == found


KILLED_AFTER = "{marker}\n{between}Killed\n"


@pytest.mark.parametrize("marker", [
    "building U-Net",                                            # kohya's sd-scripts
    "2024-12-07 18:24:57.874 | INFO | hyvideo.inference:from_pretrained:188 - Building model...",
    "=> creating model 'resnet50'",
    "Instantiating model from config",
    "Loading model from models/ldm/text2img-large/model.ckpt",
    "Loading model ...",                                         # the load announced as the whole message
    "> Loading the model...",
    "Error occurred when executing Echo_LoadModel:",             # ComfyUI's dialog naming a loader node
    "Error occurred when executing CheckpointLoaderSimple:",
    "Failed to move model to device",                            # a script's report that placing it failed
    "ERROR: error while moving the model to GPU",
])
def test_a_script_building_or_loading_its_model_is_loading_the_model(marker):
    f = facts(KILLED_AFTER.format(marker=marker, between=""))
    assert f.markers.get("loading_checkpoint_shards") == [1]
    assert f.phase.phase == "model_load"


@pytest.mark.parametrize("marker", [
    "Building model... done (12.3s)",                            # its own report that it finished
    "Creating model took 3.1 s",
    "Building wheel for flash-attn (setup.py) ... done",         # no model
    "> initializing model parallel with size 1",                 # Megatron's parallel groups, no model
    "Building a model-free baseline",
    'Creating network "x_default" with the default driver',
    "INFO: the model is ready; building model cards next",      # not at the start of the message
    "Loading model from output/checkpoint-500",                  # a resume: the resuming marker's
    "Error occurred when executing LoadImage:",                  # a ComfyUI node that loads data
    "Error occurred when executing KSampler:",
    "Failed to save model to disk",                              # a save, not a placement
])
def test_what_is_not_a_model_being_built_or_loaded(marker):
    assert "loading_checkpoint_shards" not in facts(KILLED_AFTER.format(marker=marker, between="")).markers


def test_a_load_that_said_it_was_done_is_over():
    f = facts(KILLED_AFTER.format(marker="Loading model...", between="Model loaded\nGenerating response...\n"))
    assert f.phase.phase != "model_load"


def test_a_resume_by_its_path_is_still_a_checkpoint_load():
    f = facts(KILLED_AFTER.format(marker="Loading model from output/checkpoint-500", between=""))
    assert f.phase.phase == "checkpoint_load"


@pytest.mark.parametrize("marker", ["Building model...", "Loading checkpoint shards: 100%|██| 2/2 [00:03<00:00]"])
def test_training_losses_after_a_set_up_marker_end_its_phase(marker):
    between = "".join(f"step {i} | loss: 2.{i} | lr 1e-4\n" for i in range(3))
    assert facts(KILLED_AFTER.format(marker=marker, between=between)).phase.phase is None
    # Lightning's bars name their loss ("train_loss=0.52")
    lightning = "".join(f"Epoch 0:  {i}%|#   | {i}/100 [00:0{i}<00:10, v_num=0, train_loss=0.5{i}]\n" for i in range(3))
    assert facts(KILLED_AFTER.format(marker=marker, between=lightning)).phase.phase is None
    # (lines that are no loss leave the marker where it was)
    assert facts(KILLED_AFTER.format(marker=marker, between="Model config: 12 layers\n")).phase.phase == "model_load"


YOLO_BAR = ("               Class     Images     Labels          P          R     mAP@.5 mAP@.5:.95:  {pct}% "
            "24/32 [01:09<00:22,  2.83s/it]")
YOLO8_BAR = ("                 Class     Images  Instances      Box(P          R      mAP50  mAP50-95):   {pct}%|          "
             "| 0/21 [03:11<?, ?it/s]")


@pytest.mark.parametrize("bar", [YOLO_BAR, YOLO8_BAR])
def test_a_yolo_validation_bar_unfinished_is_the_evaluation(bar):
    f = facts(bar.format(pct=75) + "\nKilled\n")
    assert f.markers.get("running_evaluation") == [1]
    assert f.phase.phase == "eval"
    # finished, its stage is over
    f = facts(bar.format(pct=100) + "\nKilled\n")
    assert "running_evaluation" not in f.markers and f.markers.get("evaluation_finished") == [1]
    # a table of results with the same columns is no bar
    assert not facts("     Class     Images  Instances      Box(P          R      mAP50  mAP50-95)\n"
                     "       all        128        929      0.672      0.591      0.661      0.445\n").markers


def test_a_dataloader_worker_killed_while_the_evaluation_runs_is_the_evaluations():
    killed = ("Traceback (most recent call last):\n"
              '  File "/opt/conda/lib/python3.10/site-packages/torch/utils/data/dataloader.py", line 1133, in _try_get_data\n'
              "    data = self._data_queue.get(timeout=timeout)\n"
              "RuntimeError: DataLoader worker (pid 40917) is killed by signal: Killed.\n")
    assert facts(YOLO8_BAR.format(pct=0) + "\n" + killed).phase.phase == "eval"
    # ... and a training bar's worker is loading training data
    assert facts(DL_KILLED.format(e=1, n=1, pct=3)).phase.phase == "data_loading"
    # an evaluation long over, or followed by training's losses, or drawn to its end, is not the one
    losses = "".join(f"{{'loss': 0.{i}, 'learning_rate': 1e-05}}\n" for i in range(3))
    assert facts(YOLO8_BAR.format(pct=0) + "\n" + losses + killed).phase.phase == "data_loading"
    far = "".join(f"step {i}\n" for i in range(40))
    assert facts(YOLO8_BAR.format(pct=0) + "\n" + far + killed).phase.phase == "data_loading"
    assert facts(YOLO8_BAR.format(pct=100) + "\n" + killed).phase.phase == "data_loading"


@pytest.mark.parametrize("line,saving", [
    ("INFO:mmdet2trt:Saving TRT model to: weights/model.trt", True),
    ("Saving best model to output/best.pth", True),
    ("Saving the model to ./out", True),
    ("Saving memory: model offloaded to CPU", False),
    ("INFO - Saving latest checkpoint model trained for 3 complete epochs", True),
    ("Saving best checkpoint to out/best.pt", True),
    ("Saving latest metrics to wandb", False),
])
def test_a_save_of_a_named_model(line, saving):
    assert bool(facts(line + "\nKilled\n").markers.get("saving_checkpoint")) is saving


@pytest.mark.parametrize("log,phase", [
    # a load announced as the whole message, then the kill: the data was being loaded
    ("Loading training data...\nKilled\n", "data_loading"),
    ("Loading kaggle dataset...\nKilled\n", "data_loading"),
    # ... not a model's or an evaluation's
    ("Loading pretrained model...\nKilled\n", None),
    ("Loading test data...\nKilled\n", None),
    # ... and a stage announced after it ("Training") ends it
    ("Loading dataset...\ndataset has 42736 tokens\nTraining...\nKilled\n", None),
])
def test_a_load_announced_by_its_own_message_is_data_loading(log, phase):
    f = facts(log)
    assert f.phase.phase == phase
    if log.count("Training"):
        assert f.markers.get("running_training") == [3]


@pytest.mark.parametrize("function, found", [
    ("decode_one_token", True), ("decode_next_token", True), ("decode_n_tokens", True),   # gpt-fast's loops
    ("decode_latents", False), ("decode", False),
])
def test_a_decoding_loop_of_the_gpt_fast_kind_is_generation(function, found):
    log = (f'  File "/x/gpt/model.py", line 120, in {function}\n    logits = model(x, input_pos)\n'
           "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB.\n")
    assert bool(facts(log).markers.get("generation")) == found


@pytest.mark.parametrize("log,phase", [
    # nn.DataParallel re-raising a replica's failure: each replica runs the module's forward
    ("    output.reraise()\n    raise exception\n"
     "torch.cuda.OutOfMemoryError: Caught OutOfMemoryError in replica 0 on device 0.\n", "forward"),
    # vLLM's worker re-raising what its model runner hit
    ("DistBackendError: Error in model execution (input dumped to /tmp/err_execute_model_input.pkl): NCCL error\n"
     "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 64.00 MiB.\n", "forward"),
    # the same words far from the error say nothing of it
    ("Caught OutOfMemoryError in replica 0 on device 0.\n" + "step 12 done\n" * 8
     + "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 64.00 MiB.\n", None),
])
def test_a_wrapper_that_names_its_pass_decides_without_frames(log, phase):
    assert facts(log).phase.phase == phase


def test_a_wrappers_forward_under_an_unfinished_evaluation_bar_is_the_evaluations():
    log = ("Evaluating:  40%|####      | 4/10 [00:03<00:05,  1.2it/s]\n    output.reraise()\n    raise exception\n"
           "torch.cuda.OutOfMemoryError: Caught OutOfMemoryError in replica 0 on device 0.\n")
    assert facts(log).phase.phase == "eval"


_TF_WARNING = ("2025-01-29 11:11:38.575277: W tensorflow/core/framework/op_kernel.cc:1745] OP_REQUIRES failed at "
               "{file}:663 : {status}: OOM when allocating tensor with shape[4,16,540,960] and type float on "
               "/job:localhost/replica:0/task:0/device:GPU:0 by allocator GPU_0_bfc\n"
               "tensorflow.python.framework.errors_impl.ResourceExhaustedError: OOM when allocating tensor with "
               "shape[4,16,540,960] and type float on /job:localhost/replica:0/task:0/device:GPU:0 by allocator GPU_0_bfc\n")


@pytest.mark.parametrize("file, status, phase", [
    ("conv_ops_fused_impl.h", "RESOURCE_EXHAUSTED", "forward"),
    ("conv_ops.cc", "Resource exhausted", "forward"),
    ("training_ops.cc", "RESOURCE_EXHAUSTED", "optimizer_step"),
    # kernels of both passes say nothing; dropout draws its masks with random_op
    ("matmul_op.cc", "RESOURCE_EXHAUSTED", None),
    ("random_op.cc", "RESOURCE_EXHAUSTED", None),
    # a kernel that failed for another reason is not the out-of-memory's
    ("conv_ops.cc", "UNIMPLEMENTED", None),
])
def test_the_kernel_file_tensorflow_names_decides_the_pass(file, status, phase):
    assert facts(_TF_WARNING.format(file=file, status=status)).phase.phase == phase
