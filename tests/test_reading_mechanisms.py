"""How the parsers read forms of evidence that real logs use (synthetic log windows,
written for these tests; the real logs that showed each form are in tests/fixtures/real)."""
from __future__ import annotations

import io

import pytest

import oomdoctor
from oomdoctor.read.normalise import strip_ansi


def report(text: str) -> dict:
    return oomdoctor.diagnose(text).model_dump(mode="json")


def test_caret_notation_escape_sequences_are_stripped():
    # a pager or terminal showed ESC as "^[" and the user copied that
    assert strip_ansi("ERR cli.py:72 -- ^[[31mJob failed^[[39m") == "ERR cli.py:72 -- Job failed"
    assert strip_ansi("a ^[ b [31 c") == "a ^[ b [31 c"
    assert strip_ansi("grep '^[[:space:]]' train.log") == "grep '^[[:space:]]' train.log"   # a regex, not a colour


def test_old_cached_figure_is_reserved_but_unallocated():
    d = report("RuntimeError: CUDA out of memory. Tried to allocate 2.74 GiB (GPU 0; 10.91 GiB total capacity; "
               "6.10 GiB already allocated; 2.56 GiB free; 1.35 GiB cached)\n")
    ev = d["oom_events"][0]
    assert ev["reserved_unallocated_bytes"] == ev["cached_unallocated_bytes"] == int(1.35 * 2**30)
    assert ev["reserved_total_bytes"] is None


def test_host_allocator_request_is_the_request_that_failed():
    d = report("RuntimeError: [enforce fail at alloc_cpu.cpp:75] err == 0. DefaultCPUAllocator: can't allocate memory: "
               "you tried to allocate 939524096 bytes. Error code 12 (Cannot allocate memory)\n")
    ev = d["oom_events"][0]
    assert ev["kind"] == "cpu_allocator"
    assert ev["tried_to_allocate_bytes"] == ev["host_bytes"] == 939524096


def test_a_cut_torchrun_failure_line_still_reports_the_sigkill():
    d = report("WARNING:torch.distributed.elastic.multiprocessing.api:Sending process 53038 closing\n"
               "ERROR:torch.distributed.elastic.multiprocessing.api:failed (exitcode: -9) local_rankroot/env/bin/python\n")
    assert [e["kind"] for e in d["oom_events"]] == ["host_oom_killer"]


@pytest.mark.parametrize("log,world", [
    ("".join(f"WARNING:torch.distributed.elastic.multiprocessing.api:Sending process {p} closing signal SIGTERM\n"
             for p in (75870, 75871, 75872))
     + "ERROR:torch.distributed.elastic.multiprocessing.api:failed (exitcode: -9) local_rank: 3 (pid: 75873) of binary: x\n", 4),
    ("[2023-04-16 08:08:00,497] [INFO] [launch.py:428:sigkill_handler] Killing subprocess 364004\n"
     "[2023-04-16 08:08:00,520] [INFO] [launch.py:428:sigkill_handler] Killing subprocess 364005\n", 2),
    ("colossalai - INFO: Distributed environment is initialized, data parallel size: 2, \n"
     "     pipeline parallel size: 2, tensor parallel size: 2 \n", 8),
])
def test_world_size_from_the_launcher_and_parallel_sizes(log: str, world: int):
    assert report(log)["environment"]["world_size"] == world


def test_a_stated_world_size_beats_the_teardown_count():
    log = ("using world size: 16, data-parallel size: 16\n"
           "WARNING:torch.distributed.elastic.multiprocessing.api:Sending process 1 closing signal SIGTERM\n"
           "ERROR:torch.distributed.elastic.multiprocessing.api:failed (exitcode: -9) local_rank: 1 (pid: 2) of binary: x\n")
    assert report(log)["environment"]["world_size"] == 16


def test_a_package_installed_as_an_egg_names_its_version_in_its_path():
    frame = ('  File "/opt/tts/lib/python3.6/site-packages/torch-1.2.0-py3.6-linux-x86_64.egg/torch/nn/modules/'
             'module.py", line 547, in __call__\n    result = self.forward(*input, **kwargs)\nRuntimeError: x\n')
    assert report(frame)["environment"]["torch_version"] == "1.2.0"
    # ... not a project's own egg, nor a package the report does not track
    other = frame.replace("torch-1.2.0-py3.6-linux-x86_64.egg/torch", "torchaudio-0.3.0-py3.6.egg/torchaudio")
    assert report(other)["environment"]["torch_version"] is None


def test_an_old_binarys_source_tree_names_its_version_in_its_error_paths():
    line = ("THCudaCheck FAIL file=/opt/conda/conda-bld/pytorch_1501972792122/work/pytorch-0.1.12/torch/lib/THC/generic/"
            "THCStorage.cu line=66 error=2 : out of memory\n")
    assert report(line)["environment"]["torch_version"] == "0.1.12"
    # ... a newer build's path names none
    line = "RuntimeError: $ Torch: not enough memory: at /opt/conda/conda-bld/pytorch_1544199946412/work/aten/src/TH/THGeneral.cpp:201\n"
    assert report(line)["environment"]["torch_version"] is None


def test_banner_versions_in_the_python_dash_torch_dash_form():
    d = report("Ultralytics YOLOv8.1.19 Python-3.10.12 torch-2.2.1+cu121 CUDA:0 (NVIDIA GeForce RTX 3060, 12036MiB)\n")
    assert d["environment"]["torch_version"] == "2.2.1"


def _tb(*frames: tuple[str, str, str], error: str = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB") -> str:
    lines = ["Traceback (most recent call last):"]
    for path, func, code in frames:
        lines += [f'  File "{path}", line 10, in {func}', f"    {code}"]
    return "\n".join(lines + [error, ""])


@pytest.mark.parametrize("frames,phase", [
    # vLLM constructing its engine, which loads the model
    ([("/workspace/vllm/vllm/engine/multiprocessing/engine.py", "run_mp_engine", "engine = MQLLMEngine.from_engine_args("),
      ("/workspace/vllm/vllm/engine/multiprocessing/engine.py", "from_engine_args", "return cls(")],
     "model_load"),
    # DDP's constructor broadcasting rank 0's weights
    ([("train.py", "main", "model = DDP(model, device_ids=[rank])"),
      ("/env/site-packages/torch/distributed/utils.py", "_sync_params_and_buffers", "dist._broadcast_coalesced(")],
     "model_load"),
    # ... but DDP's forward syncing its buffers each step is the forward pass
    ([("train.py", "train", "out = model(x)"),
      ("/env/site-packages/torch/nn/parallel/distributed.py", "forward", "self._sync_buffers()"),
      ("/env/site-packages/torch/nn/parallel/distributed.py", "_sync_module_buffers", "self._default_broadcast_coalesced(")],
     "forward"),
    # a policy's log-probabilities of its tokens: a forward pass
    ([("/app/rl/trainer.py", "train_step", "logprobs = self.policy.get_logprobs(batch)"),
      ("/app/rl/policy_worker.py", "get_logprobs", "return torch.gather(lp, -1, ids)")], "forward"),
    # ... not a function whose name only holds those words
    ([("/app/rl/trainer.py", "train_step", "self.log_probs_histogram(stats)"),
      ("/app/rl/stats.py", "log_probs_histogram", "counts = torch.histc(x)")], None),
    # a trainer caching its dataset's latents before training
    ([("train_network.py", "train", "train_dataset_group.cache_latents(vae, args.vae_batch_size)"),
      ("library/train_util.py", "cache_latents", "cache_batch_latents(vae, cache_to_disk, batch)"),
      ("library/train_util.py", "cache_batch_latents", "latents = vae.encode(img_tensors).latent_dist.sample()")],
     "data_loading"),
    # ... not a model's key/value cache, updated in its forward pass
    ([("train.py", "train", "out = model(input_ids)"),
      ("/env/site-packages/transformers/models/llama/modeling_llama.py", "forward",
       "key_states, value_states = past_key_value.update(key_states, value_states, self.layer_idx)"),
      ("/env/site-packages/transformers/cache_utils.py", "update", "self.key_cache[layer_idx] = torch.cat(")],
     "forward"),
    # Apache Arrow combining a dataset's tables
    ([("/env/site-packages/datasets/table.py", "concat_tables", "pa_table = pa_table.combine_chunks()"),
      ("pyarrow/table.pxi", "pyarrow.lib.Table.combine_chunks", "")], "data_loading"),
    # ... not a project's own module whose folder is named after Arrow, called in the step
    ([("train.py", "train", "loss = step(batch)"),
      ("/app/to_pyarrow/metrics.py", "step", "out = self.model(batch)")], "forward"),
    # the code of a package's evaluation module, in a traceback cut above the trainer's frames
    ([("rfdetr/evaluation/matching.py", "_match_single_class", "iou_matrix = _compute_mask_iou(pred, gt)"),
      ("rfdetr/evaluation/matching.py", "_compute_mask_iou", "gt_flat = gt_masks.bool().view(m, -1).float()")], "eval"),
    # ... or of an evaluation harness, in any of its modules (lm_eval probing the largest batch)
    ([("/workspace/lm_eval/models/huggingface.py", "_detect_batch_size", "batch_size = forward_batch()"),
      ("/env/site-packages/accelerate/utils/memory.py", "decorator", "return function(batch_size, *args, **kwargs)")],
     "eval"),
    # ... not a training script kept below a folder named like one of the generic names
    ([("/work/eval/proj/train.py", "main", "model = build()"), ("/work/eval/proj/net.py", "<module>", "import x")], None),
    # images sampled for the logs while a generative model trains (latent diffusion's log_images)
    ([("/home/user/ControlNet/cldm/cldm.py", "log_images", "samples_cfg, _ = self.sample_log(cond=c)"),
      ("/home/user/ControlNet/cldm/cldm.py", "sample_log", "samples, intermediates = ddim_sampler.sample(")], "eval"),
    # ... nor a script kept in a folder of that name, in a training step's backward pass
    ([("/work/eval/finetune_probe.py", "train", "loss.backward()"),
      ("/env/site-packages/torch/_tensor.py", "backward", "torch.autograd.backward("),
      ("/env/site-packages/torch/autograd/__init__.py", "backward", "_engine_run_backward(")], "backward"),
    # ... nor its forward pass, or an optimizer step named on its last line
    ([("/work/eval/finetune_probe.py", "train", "loss = model(batch)"),
      ("/env/site-packages/torch/nn/modules/module.py", "_call_impl", "return forward_call(*args, **kwargs)"),
      ("/work/eval/model.py", "forward", "x = self.proj(x)")], "forward"),
    ([("/work/eval/x.py", "train", "optimizer.step()")], "optimizer_step"),
    # ... not a package whose name only ends in those letters (retrieval/), in a training step
    ([("retrieval/train.py", "train", "loss = model(batch)"),
      ("retrieval/model.py", "forward", "scores = q @ d.T")], "forward"),
    # a function of the training loop run under torch.no_grad (sample images drawn for a look)
    ([("core/solver.py", "train", "utils.debug_image(nets_ema, args, inputs=inputs_val, step=i+1)"),
      ("/env/site-packages/torch/autograd/grad_mode.py", "decorate_no_grad", "return func(*args, **kwargs)"),
      ("core/utils.py", "debug_image", "translate_using_latent(nets, args, x_src, y_trg_list, z_trg_list, psi, filename)")],
     "eval"),
    # ... with the model's forward below it: still that pass
    ([("core/solver.py", "train", "utils.debug_image(nets_ema, args, inputs=inputs_val, step=i+1)"),
      ("/env/site-packages/torch/utils/_contextlib.py", "decorate_context", "return func(*args, **kwargs)"),
      ("core/utils.py", "debug_image", "x_fake = nets.generator(x_src, s_trg)"),
      ("/env/site-packages/torch/nn/modules/module.py", "_call_impl", "return forward_call(*args, **kwargs)"),
      ("core/model.py", "forward", "x = block(x, s)")], "eval"),
    # ... also when the model is called on the function's last line
    ([("core/solver.py", "train", "utils.debug_image(nets_ema, args, inputs=inputs_val, step=i+1)"),
      ("/env/site-packages/torch/utils/_contextlib.py", "decorate_context", "return func(*args, **kwargs)"),
      ("core/utils.py", "debug_image", "x_fake = generator(x_src, s_trg)")], "eval"),
    # ... not an average named in camelCase
    ([("core/solver.py", "train", "copyEma(model, ema_model)"),
      ("/env/site-packages/torch/utils/_contextlib.py", "decorate_context", "return func(*args, **kwargs)"),
      ("core/utils.py", "copyEma", "p_ema.copy_(p)")], None),
    # ... a name with those letters inside it is no average ("remap_tokens")
    ([("core/solver.py", "train", "ids = remap_tokens(batch)"),
      ("/env/site-packages/torch/utils/_contextlib.py", "decorate_context", "return func(*args, **kwargs)"),
      ("core/utils.py", "remap_tokens", "return table[ids]")], "eval"),
    # ... not one that updates an average of the weights without gradients
    ([("core/solver.py", "train", "moving_average(nets.generator, nets_ema.generator, beta=0.999)"),
      ("/env/site-packages/torch/utils/_contextlib.py", "decorate_context", "return func(*args, **kwargs)"),
      ("core/solver.py", "update_ema", "param_test.copy_(torch.lerp(param, param_test, beta))")], None),
    # transformers padding and joining the predictions an evaluation gathers
    ([("/env/site-packages/transformers/trainer_pt_utils.py", "torch_pad_and_concatenate",
       "result = tensor1.new_full(new_shape, padding_index)")], "eval"),
    # a script's own evaluation function around the model's forward
    ([("train.py", "train_epoch", "self.validate()"), ("train.py", "validate", "result = self.model(batch)"),
      ("/env/site-packages/torch/nn/modules/module.py", "__call__", "result = self.forward(*input)"),
      ("models/net.py", "forward", "x = x * y")], "eval"),
    # a runner that builds its model inside train() (mmengine's FlexibleRunner)
    ([("/env/site-packages/mmengine/runner/_flexible_runner.py", "train", "self.strategy.prepare(self.model)"),
      ("/env/site-packages/mmengine/_strategy/base.py", "build_model", "model = MODELS.build(model)"),
      ("/env/site-packages/mmengine/registry/build_functions.py", "build_from_cfg", "obj = obj_cls(**args)")],
     "model_load"),
    # ... but a training step under train() is not one
    ([("/env/site-packages/mmengine/runner/_flexible_runner.py", "train", "self.train_loop.run()"),
      ("models/net.py", "forward", "x = x * y")], "forward"),
    # the HF Trainer placing the model inside train(): accelerate's prepare, DDP's constructor
    ([("/env/site-packages/transformers/trainer.py", "_inner_training_loop",
       "model, self.optimizer = self.accelerator.prepare(self.model, self.optimizer)"),
      ("/env/site-packages/accelerate/accelerator.py", "prepare_model", "model = torch.nn.parallel.DistributedDataParallel("),
      ("/env/site-packages/torch/nn/parallel/distributed.py", "_ddp_init_helper", "self.reducer = dist.Reducer(")],
     "model_load"),
    # ... but an offloading hook placing weights during the forward pass is the forward pass
    ([("/env/site-packages/transformers/trainer.py", "training_step", "loss = self.compute_loss(model, inputs)"),
      ("/env/site-packages/torch/nn/modules/module.py", "_call_impl", "return forward_call(*args, **kwargs)"),
      ("/env/site-packages/accelerate/hooks.py", "new_forward", "args, kwargs = module._hf_hook.pre_forward(module, *args, **kwargs)"),
      ("/env/site-packages/accelerate/utils/modeling.py", "set_module_tensor_to_device", "new_value = value.to(device)")],
     "forward"),
    # Windows paths read like POSIX ones: a layer built on the host (nn.Embedding's __init__)
    ([("D:\\user\\proj\\models.py", "__init__", "self.word_embed = nn.Embedding(n_vocab, emb_dim)"),
      ("C:\\Anaconda3\\lib\\site-packages\\torch\\nn\\modules\\sparse.py", "__init__",
       "self.weight = Parameter(torch.Tensor(num_embeddings, embedding_dim))")], "model_load"),
    # an optimizer's own load_state_dict (a checkpoint restored at the end of training)
    ([("pythia/trainers/base_trainer.py", "finalize", "self.checkpoint.restore()"),
      ("pythia/utils/checkpoint.py", "restore", 'self.trainer.optimizer.load_state_dict(ckpt["optimizer"])'),
      ("/env/site-packages/torch/optim/optimizer.py", "load_state_dict", "state_dict = deepcopy(state_dict)")],
     "checkpoint_load"),
    # ... but not a function that trains and evaluates
    ([("train.py", "train_and_evaluate", "loss = model(batch)"), ("models/net.py", "forward", "x = x * y")], "forward"),
    # the HF Trainer's _maybe_log_save_evaluate (it logs, evaluates and saves): its call in
    # progress decides, not its name
    ([("/env/site-packages/transformers/trainer.py", "_inner_training_loop", "self._maybe_log_save_evaluate(tr_loss, model)"),
      ("/env/site-packages/transformers/trainer.py", "_maybe_log_save_evaluate", "self._save_checkpoint(model, trial, metrics=metrics)")],
     "checkpoint_save"),
    ([("/env/site-packages/transformers/trainer.py", "_inner_training_loop", "self._maybe_log_save_evaluate(tr_loss, model)"),
      ("/env/site-packages/transformers/trainer.py", "_maybe_log_save_evaluate", "metrics = self.evaluate(ignore_keys=ignore_keys_for_eval)")],
     "eval"),
    ([("/env/site-packages/transformers/trainer.py", "_inner_training_loop", "self._maybe_log_save_evaluate(tr_loss, model)"),
      ("/env/site-packages/transformers/trainer.py", "_maybe_log_save_evaluate", "self.log(logs)")],
     None),
    # the model placed on the device inside a loader of the script's own
    ([("main.py", "<module>", "model = load_model_from_config(config, ckpt)"),
      ("main.py", "load_model_from_config", "model.cuda()")], "model_load"),
    # ... and by a trainer, to a device named by an attribute
    ([("/env/site-packages/optuna/_optimize.py", "_run_trial", "value_or_values = func(trial)"),
      ("/env/site-packages/transformers/trainer.py", "train", "self.model = model.to(self.args.device)")], "model_load"),
    # an optimizer's state read back by a script's own "load_model" is a resume
    ([("lm/main.py", "load_model", "optimizer.load_state_dict(torch.load(optimizer_path))"),
      ("/env/site-packages/torch/serialization.py", "load", "return _load(f, map_location, pickle_module)"),
      ("/env/site-packages/torch/serialization.py", "_cuda_deserialize", "return storage_type(obj.size())")],
     "checkpoint_load"),
    # ... but a model's own weights read by it are the model's
    ([("lm/main.py", "load_model", "optim_model.load_state_dict(torch.load(path))"),
      ("/env/site-packages/torch/serialization.py", "load", "return _load(f, map_location, pickle_module)")],
     "model_load"),
    # an image written by PIL during training (a visualiser's samples) is no checkpoint save
    ([("train.py", "<module>", "visualizer.display_current_results(visuals, epoch, total_steps)"),
      ("util/util.py", "save_image", "image_pil.save(image_path)"),
      ("/env/site-packages/PIL/Image.py", "save", "save_handler(self, fp, filename)"),
      ("/env/site-packages/PIL/JpegImagePlugin.py", "_save", "ImageFile._save(im, fp, tile, bufsize)")], None),
    # ... nor a figure or images saved on the innermost line
    ([("train.py", "train", "plot_losses(history)"), ("train.py", "plot_losses", "plt.savefig(path)")], None),
    ([("train.py", "<module>", "visualizer.display_current_results(visuals, epoch)"),
      ("util/visualizer.py", "display_current_results", "save_images(webpage, visuals, img_path)")], None),
    # ... while a trainer's own _save is one
    ([("/env/site-packages/transformers/trainer.py", "_save_checkpoint", "self.save_model(output_dir, _internal_call=True)"),
      ("/env/site-packages/transformers/trainer.py", "_save", "self.model.save_pretrained(output_dir)")], "checkpoint_save"),
    # a trainer setting up its model and tokenizer (a plugin's check before the model loads)
    ([("/env/site-packages/axolotl/train.py", "setup_model_and_tokenizer", "model, peft_config = model_loader.load()"),
      ("/env/site-packages/axolotl/integrations/base.py", "pre_model_load", "plugin.pre_model_load(cfg)"),
      ("/env/site-packages/axolotl/integrations/cut_cross_entropy/__init__.py", "_check_requirements", "raise ImportError(")],
     "model_load"),
    # ... and a function that builds a tokenizer is not tokenising data
    ([("train.py", "main", "tok = build_tokenizer(cfg)"), ("utils.py", "build_tokenizer", "vocab = read_vocab(cfg.path)")],
     None),
    # ... while tokenising the data is loading data
    ([("/env/site-packages/datasets/arrow_dataset.py", "map", "for rank, done, content in iflatmap_unordered("),
      ("train.py", "tokenize_function", "return tokenizer(examples['text'])")], "data_loading"),
    # a trainer preparing its datasets
    ([("/env/site-packages/axolotl/cli/train.py", "do_cli", "dataset_meta = load_datasets(cfg=parsed_cfg)"),
      ("/env/site-packages/axolotl/utils/data.py", "prepare_dataset", "raise ValueError(")], "data_loading"),
    # ... not one building its DataLoader for the step (the step's own frames decide)
    ([("/env/site-packages/transformers/trainer.py", "get_train_dataloader", "return DataLoader(train_dataset)")],
     None),
    # apex's amp.scale_loss context around the backward pass
    ([("train.py", "train_epoch", "with amp.scale_loss(loss, optimizer) as scaled_loss:"),
      ("/opt/conda/lib/python3.6/contextlib.py", "__exit__", "next(self.gen)"),
      ("/opt/conda/lib/python3.6/site-packages/apex/amp/handle.py", "scale_loss", "loss_scaler.update_scale()"),
      ("/opt/conda/lib/python3.6/site-packages/apex/amp/scaler.py", "update_scale", "self._overflow_buf.item()")],
     "backward"),
    # DistributedDataParallel's constructor allocating its gradient buckets
    ([("train.py", "main", "model = torch.nn.parallel.DistributedDataParallel("),
      ("/env/site-packages/torch/nn/parallel/distributed.py", "__init__", "self._ddp_init_helper("),
      ("/env/site-packages/torch/nn/parallel/distributed.py", "_ddp_init_helper", "self.reducer = dist.Reducer(")],
     "model_load"),
    # a command-line library's wrapper around main() says nothing: the script's train() calling
    # its model (a cut traceback) is the forward pass
    ([("finetune/adapter.py", "<module>", "CLI(main)"),
      ("/env/site-packages/jsonargparse/cli.py", "_run_component", "return component(**cfg)"),
      ("finetune/adapter.py", "main", "train(fabric, model, optimizer)"),
      ("finetune/adapter.py", "train", "logits = model(input_ids)")], "forward"),
    # ... and without a training frame, the same call names nothing
    ([("finetune/adapter.py", "<module>", "CLI(main)"),
      ("/env/site-packages/jsonargparse/cli.py", "_run_component", "return component(**cfg)"),
      ("finetune/adapter.py", "main", "out = model(batch)")], None),
    # a sharded optimizer's state gathered for a save (fairscale's OSS), read back from the
    # broadcast bytes by torch.load: a save, not a load
    ([("train.py", "save", "state = optimizer.state_dict()"),
      ("/env/site-packages/fairscale/optim/oss.py", "state_dict", "self.consolidate_state_dict(recipient_rank=-1)"),
      ("/env/site-packages/fairscale/optim/oss.py", "consolidate_state_dict", "dist.broadcast_object_list("),
      ("/env/site-packages/torch/serialization.py", "load", "return _legacy_load(opened_file)")], "checkpoint_save"),
    # an optimizer's saved state read back, named by its caller's function or file: a resume
    ([("run/train.py", "main", "trainer.restore(path)"),
      ("model/utils.py", "load_opt_state", "checkpoint = th.load(os.path.join(model_path, 'optimizers.bin'))"),
      ("/env/site-packages/torch/serialization.py", "load", "return _load(opened_zipfile)")], "checkpoint_load"),
    ([("run/train.py", "main", "trainer.restore(path)"),
      ("model/utils.py", "load_weights", "checkpoint = th.load(os.path.join(model_path, 'model.bin'))"),
      ("/env/site-packages/torch/serialization.py", "load", "return _load(opened_zipfile)")], "model_load"),
    # a trainer restoring its saved state (Lightning's checkpoint connector)
    ([("/env/site-packages/pytorch_lightning/trainer/trainer.py", "_run", "self._checkpoint_connector.restore_training_state()"),
      ("/env/site-packages/pytorch_lightning/trainer/connectors/checkpoint_connector.py", "restore_optimizers_and_schedulers",
       "self.restore_optimizers()")], "checkpoint_load"),
    # ... but not a compiler restoring its graph state
    ([("/env/site-packages/torch/_dynamo/symbolic_convert.py", "restore_graphstate", "self.output.restore_graphstate(state)")],
     None),
    # an inference routine inside a training script's validation (MONAI), a model kept for inference
    ([("train.py", "val_epoch", "logits = sliding_window_inference(x, roi, 4, model)"),
      ("/env/site-packages/monai/inferers/utils.py", "sliding_window_inference",
       "count_map = torch.zeros(output_shape, device=device)")], "eval"),
    ([("gcn_ns_sc.py", "main", "pred = infer_model(nf)"),
      ("/env/site-packages/torch/nn/modules/module.py", "__call__", "result = self.forward(*input, **kwargs)"),
      ("gcn_ns_sc.py", "forward", "nf.block_compute(i)")], "eval"),
    # a routine named for inference in short, at its name's end (GPT-SoVITS' batched decoding)
    ([("ttt.py", "<module>", "pred, idx = t2s_model.model.infer_panel_batch_infer(x, x_lens, prompts)"),
      ("GPT_SoVITS/AR/models/t2s_model.py", "infer_panel_batch_infer", "xy_dec, k, v = self.t2s_transformer.decode_next_token(xy_pos, k, v)"),
      ("GPT_SoVITS/AR/models/t2s_model.py", "decode_next_token", "attn = F.linear(attn, self.out_w, self.out_b)")], "eval"),
    # ... not a routine that deduces something ("infer_modules_masks", "infer_shapes")
    ([("/env/site-packages/nni/compression/pytorch/compressor.py", "infer_modules_masks", "self.infer_module_mask(module)")],
     None),
    # ... a library's infer_auto_device_map is model loading
    ([("train.py", "main", "model = AutoModelForCausalLM.from_pretrained(path, device_map='auto')"),
      ("/env/site-packages/transformers/modeling_utils.py", "from_pretrained",
       "device_map = infer_auto_device_map(model, max_memory=max_memory)"),
      ("/env/site-packages/accelerate/utils/modeling.py", "get_max_memory", "_ = torch.tensor([0], device=i)")],
     "model_load"),
    ([("gcn_ns_sc.py", "main", "pred = train_model(nf)"),
      ("/env/site-packages/torch/nn/modules/module.py", "__call__", "result = self.forward(*input, **kwargs)"),
      ("gcn_ns_sc.py", "forward", "nf.block_compute(i)")], "forward"),
    # safetensors writing a file under a trainer's own save of its weights
    ([("D:\\kohya_ss\\library\\sdxl_model_util.py", "save_stable_diffusion_checkpoint", "save_file(state_dict, output_file)"),
      ("D:\\kohya_ss\\venv\\lib\\site-packages\\safetensors\\torch.py", "save_file", "serialize_file(_flatten(tensors))"),
      ("D:\\kohya_ss\\venv\\lib\\site-packages\\safetensors\\torch.py", "_tobytes", "return data.tobytes()")],
     "checkpoint_save"),
    ([("/app/trainer.py", "train", "write_out(state, path)"),
      ("/env/site-packages/safetensors/torch.py", "save_file", "serialize_file(_flatten(tensors))")], "checkpoint_save"),
    ([("/app/trainer.py", "train", "self.network.save_weights(path)"),
      ("/env/site-packages/lycoris/wrapper.py", "save_weights", "save_file(state_dict, file, metadata)")], "checkpoint_save"),
    # ... reading one is not a save
    ([("/env/site-packages/safetensors/torch.py", "load_file", "result[k] = f.get_tensor(k)")], "model_load"),
    # a model held in a private attribute ("self._model(**batch)")
    ([("/env/site-packages/recipes/lora_finetune_distributed.py", "train", "logits = self._model(**batch)")], "forward"),
    # a JAX trainer creating its parameters and optimizer state: in the frames, or the call a cut
    # traceback ends on
    ([("scripts/train.py", "main", "state = init_train_state(config, rng, mesh)"),
      ("scripts/train.py", "init_train_state", "train_state = jax.jit(init, out_shardings=sharding)(rng)")], "model_load"),
    ([("scripts/train.py", "main", "state = create_train_state(rng, config)")], "model_load"),
    # ... its training step is not
    ([("scripts/train.py", "main", "state, metrics = train_step(state, batch)")], None),
    # a forward pass in a script named for evaluation, nothing in the stack training
    ([("../main/eval_knn.py", "extract_feature_pipeline", "feats = nn.functional.normalize(feats, dim=1, p=2)"),
      ("/env/site-packages/torch/nn/functional.py", "normalize", "return input / denom")], "eval"),
    # ... but a training function in it trains, and a backward pass is a backward pass
    ([("eval_knn.py", "train_one_epoch", "out = model(x)"),
      ("/env/site-packages/torch/nn/functional.py", "linear", "return torch._C._nn.linear(input, weight, bias)")],
     "forward"),
    ([("eval_knn.py", "main", "loss.backward()"),
      ("/env/site-packages/torch/_tensor.py", "backward", "torch.autograd.backward(self, gradient)")], "backward"),
    ([("train_knn.py", "extract_features", "feats = nn.functional.normalize(feats, dim=1, p=2)"),
      ("/env/site-packages/torch/nn/functional.py", "normalize", "return input / denom")], "forward"),
    # a model object being constructed: the code that makes it, constructors below
    ([("export.py", "<module>", "generator = Llama.build(ckpt_dir)"),
      ("llama/generation.py", "build", "model = Transformer(model_args)"),
      ("llama/model.py", "__init__", "self.layers.append(TransformerBlock(layer_id, params))"),
      ("llama/model.py", "__init__", "self.cache_v = torch.zeros((b, s, h, d)).cuda()")], "model_load"),
    # ... not when a method other than a constructor runs below it
    ([("llama/generation.py", "Llama.build", "model = Transformer(model_args)"),
      ("llama/model.py", "Attention.__init__", "self.cache_v = torch.zeros((b, s, h, d)).cuda()")], "model_load"),
    ([("llama/generation.py", "build", "model = Transformer(model_args)"),
      ("llama/model.py", "warm_up", "self.cache_v = torch.zeros((b, s, h, d)).cuda()")], None),
    ([("llama/generation.py", "build", "model = Transformer(model_args)"),
      ("llama/model.py", "__init__", "self.warm_up()"),
      ("llama/model.py", "warm_up", "self.cache_v = torch.zeros((b, s, h, d)).cuda()")], None),
    # ... nor when only a library's code runs below it
    ([("train.py", "main", "model = Net(cfg)(torch.randn(1, 3, 224, 224).cuda())"),
      ("/env/site-packages/torch/nn/functional.py", "relu", "result = torch.relu(input)")], "forward"),
    # a trainer's constructor creating its optimizer in the script's own code: the optimizer's state
    ([("train.py", "main", "trainer = SingleTrainer(model, data, params)"),
      ("/src/xlm/trainer.py", "__init__", "self.set_optimizers()"),
      ("/src/xlm/trainer.py", "set_optimizers", "self.optimizers['model'] = get_optimizer(params)"),
      ("/src/xlm/optim.py", "__init__", "state['exp_avg_sq'] = torch.zeros_like(p.data)")], "optimizer_step"),
    # ... while one that only places the model is loading it
    ([("train.py", "main", "trainer = SingleTrainer(model, data, params)"),
      ("/src/xlm/trainer.py", "__init__", "self.model = model.cuda()")], "model_load"),
    # pandas reading a file (its Cython parser innermost), a script that prepares the data
    ([("prep.ipynb", "<module>", "df = pd.read_csv('data/full.tsv', sep='\\t')"),
      ("pandas/_libs/parsers.pyx", "pandas._libs.parsers.TextReader._string_convert", "")], "data_loading"),
    ([("fcm/preprocess.py", "_shuffle_lines", "lines = f.read().splitlines()")], "data_loading"),
    # a script named for preparing its data, or the script's own function named for it
    ([("prepro.py", "main", "all_feats = np.ndarray([n_examples, 196, 512], dtype=np.float32)")], "data_loading"),
    ([("keras_spell.py", "main_news", "X, y = vectorize(questions, answers, chars)"),
      ("keras_spell.py", "vectorize", "X = np_zeros((n, x_maxlen, len(chars)), dtype=np.bool)")], "data_loading"),
    ([("image_to_array.py", "<module>", "X_train = convert_images_to_arrays_train(path, labels)"),
      ("image_to_array.py", "convert_images_to_arrays_train", "return np.array([np.array(Image.open(p)) for p in lst])")],
     "data_loading"),
    # ... not a function of that name in an evaluation module (scoring), nor a library's own
    ([("eval.py", "main", "stats = evaluate(preds, gts)"),
      ("rfdetr/evaluation/matching.py", "build_matching_data", "ious = _compute_mask_iou(p, g)")], "eval"),
    ([("run.py", "main", "x = api.get()"),
      ("/env/site-packages/somelib/io.py", "load_data", "return np.empty(shape)")], None),
    # ... nor one that runs a model on the data it prepares
    ([("train.py", "load_features", "feats = encoder(batch.cuda())"), ("/src/models/net.py", "forward", "x = self.conv(x)")],
     "forward"),
    # a slide, volume or image reader reading its file: data loading
    ([("tools/convert.py", "convert_for_file", "img = np.array(slide.read_region((0, 0), level, dims))"),
      ("/env/site-packages/openslide/__init__.py", "read_region", "level, size[0], size[1])"),
      ("/env/site-packages/openslide/lowlevel.py", "read_region", "buf = (w * h * c_uint32)()")], "data_loading"),
    ([("prep.py", "main", "vol = nib.load(path).get_fdata()"),
      ("/env/site-packages/nibabel/dataobj_images.py", "get_fdata", "data = np.asanyarray(self._dataobj, dtype=dtype)")],
     "data_loading"),
    # ... not PIL writing one
    ([("export.py", "main", "img.save(path)"), ("/env/site-packages/PIL/Image.py", "save", "fp = builtins.open(filename, 'w+b')")],
     None),
    # transformers placing a quantized model's weights as it loads them
    ([("/env/site-packages/transformers/utils/bitsandbytes.py", "set_module_quantized_tensor_to_device",
       "new_value = value.to(device)")], "model_load"),
    # transformers building a batch's attention mask: the model's forward
    ([(".../transformers/masking_utils.py", "and_mask",
       "result = result & mask(batch_idx, head_idx, q_idx, kv_idx).to(result.device)")], "forward"),
    # a script's function named for the loader it wraps or iterates, the next batch asked of it
    ([("fastvideo/train.py", "train_one_step", ") = next(loader)"),
      ("fastvideo/utils/communications.py", "sp_parallel_dataloader_wrapper", "latents = prepare_sequence_parallel_data(")],
     "data_loading"),
    # ... not when the model runs below it
    ([("train.py", "cycle_dataloader", "yield model(batch)"), ("/src/models/net.py", "forward", "x = self.conv(x)")],
     "forward"),
    # ... not pandas writing one, nor a preparation script that runs a model on its data
    ([("export.py", "main", "df.to_parquet(out)"), ("/env/site-packages/pandas/io/parquet.py", "write", "table = self.api.Table")],
     None),
    ([("tools/preprocess.py", "<module>", "feats = encoder(batch.cuda())"), ("/src/models/net.py", "forward", "x = self.conv(x)")],
     "forward"),
    # ... and a training step's frames name neither
    ([("train.py", "train", "out = model(batch)"), ("/src/models/net.py", "forward", "x = self.conv(x)")], "forward"),
])
def test_phase_from_function_names_and_code_lines(frames, phase):
    assert report(_tb(*frames))["phase"] == phase


@pytest.mark.parametrize("script,phase", [("eval_segmentation.py", "eval"), ("tools/predict.py", "eval"),
                                          # a generative model's sampling script
                                          ("DiT/sample_ddp.py", "eval"), ("scripts/sample.py", "eval"),
                                          ("train_eval.py", None), ("train.py", None), ("data/sampler.py", None)])
def test_a_script_named_for_evaluation_is_evaluating_when_nothing_else_tells(script, phase):
    frames = [(script, "my_app", "outputs = {k: torch.cat(v, dim=0) for k, v in outputs.items()}")]
    assert report(_tb(*frames))["phase"] == phase


def test_a_frame_that_names_a_phase_decides_over_an_evaluation_scripts_name():
    frames = [("eval_segmentation.py", "main", "model = AutoModel.from_pretrained(path)"),
              ("/env/site-packages/transformers/modeling_utils.py", "from_pretrained", "model = cls(config)")]
    assert report(_tb(*frames))["phase"] == "model_load"


@pytest.mark.parametrize("code,phase", [
    ("loss.backward()", "backward"),
    ("self.optimizer.step()", "optimizer_step"),
    ("action_log_probs = self.actor(experience.sequences, num_actions)", "forward"),
])
def test_a_cut_traceback_in_a_training_step_takes_its_phase_from_the_last_code_line(code, phase):
    text = _tb(("/env/site-packages/chatgpt/trainer/base.py", "fit", "self._learn()"),
               ("/env/site-packages/chatgpt/trainer/ppo.py", "training_step", code), error="")
    assert report(text)["phase"] == phase


def test_the_tail_of_rays_memory_monitor_message_is_a_host_kill():
    d = report("95412   14.05   ray::LLMRayActor\n"
               "Refer to the documentation on how to address the out of memory issue: "
               "https://docs.ray.io/en/latest/ray-core/scheduling/ray-oom-prevention.html. Consider provisioning more memory\n")
    assert [e["kind"] for e in d["oom_events"]] == ["host_oom_killer"]


def test_rays_old_memory_monitor_error_is_a_host_oom():
    # Ray 0.x-1.x raised RayOutOfMemoryError from its memory monitor instead of killing a worker
    d = report("ray.memory_monitor.RayOutOfMemoryError: More than 95% of the memory on node node1 is used "
               "(15.98 / 16.82 GB). The top 5 memory consumers are:\n")
    assert [(e["kind"], e["strength"]) for e in d["oom_events"]] == [("host_oom_killer", "certain")]
    assert d["diagnoses"][0]["incident"] == "host-oom"
    # a class of that name in a traceback's code, with no monitor message, is not one
    assert not report("    except RayOutOfMemoryError as e:\n")["oom_events"]


@pytest.mark.parametrize("word", ["已杀死", "強制終了", "強制結束", "Getötet", "Terminado (killed)", "Processus arrêté",
                                  "Zabit (SIGKILL)", "죽었음", "Süreç durduruldu", "Geëlimineerd"])
def test_the_shells_killed_in_the_users_language(word: str):
    d = report("  0%|          | 0/1 [00:00<?, ?it/s]" + word + "\n")
    assert [e["kind"] for e in d["oom_events"]] == ["host_oom_killer"]
    assert d["diagnoses"][0]["incident"] == "host-oom"
    # ... and alone on its line after the job's last words, as the shell prints it
    d = report("Caching all 373 images.\n" + word + "\n")
    assert [e["kind"] for e in d["oom_events"]] == ["host_oom_killer"]


@pytest.mark.parametrize("word", ["Morto", "Ucciso", "Убито", "Вбито", "Dödad", "Terbunuh"])
def test_a_translation_that_is_an_ordinary_word_is_a_kill_only_alone_on_its_line(word: str):
    # ("dead", "killed": words a game's or an agent's log prints too)
    assert [e["kind"] for e in report("Caching all 373 images.\n" + word + "\n")["oom_events"]] == ["host_oom_killer"]
    assert not report("Giocatore (rosso) " + word + "\n")["oom_events"]
    assert not report("[npc_12] (" + word + ")\n")["oom_events"]


def test_a_word_for_killed_inside_a_sentence_is_not_a_kill():
    assert not report("Der Prozess wurde nicht Getötet, alles gut\n")["oom_events"]
    assert not report("Etat du job : Processus arrêté\n")["oom_events"]


def test_a_script_reading_a_weight_file_when_it_is_killed_is_loading_the_model():
    d = report("Initializing lit-llama\nProcessing pytorch_model-00001-of-00002.bin\nKilled\n")
    assert d["phase"] == "model_load"


def test_a_kill_while_deepspeed_reads_a_zero_checkpoint_is_a_resume():
    d = report("[INFO|deepspeed.py:449] 2022-05-15 00:12:20,447 >> Attempting to resume from out/checkpoint-22\n"
               "[2022-05-15 00:12:51,292] [INFO] [engine.py:2754:_get_all_zero_checkpoint_state_dicts] "
               "successfully read 2 ZeRO state_dicts for rank 0\n"
               "[2022-05-15 00:12:57,785] [INFO] [launch.py:178:sigkill_handler] Killing subprocess 97277\n")
    assert d["phase"] == "checkpoint_load"


def test_a_rich_frame_whose_function_wrapped_onto_the_next_box_line():
    d = report("│ /opt/conda/lib/python3.8/site-packages/deepspeed/accelerator/cuda_accelerator.py:217 in          │\n"
               "│ pin_memory                                                                                       │\n"
               "│                                                                                                  │\n"
               "│ ❱ 217 │   │   return tensor.pin_memory()                                                         │\n")
    assert [(f["function"], f["lineno"]) for f in d["frames"]] == [("pin_memory", 217)]
    assert d["phase_detail"]["stops_early"] == "cut_traceback"


def test_a_rich_frame_whose_line_number_wrapped_onto_the_next_box_line():
    d = report("│ /data/user/anaconda3/envs/llama/lib/python3.9/site-packages/transformers/trainer.py:283 │\n"
               "│ 0 in save_model                                                                                  │\n"
               "│                                                                                                  │\n"
               "│ ❱ 2830 │   │   │   self._save(output_dir)                                                        │\n")
    assert [(f["function"], f["lineno"]) for f in d["frames"]] == [("save_model", 2830)]
    assert d["phase"] == "checkpoint_save"
    # a box line that only ends in a number, and prose under it, are no frame
    d = report("│ see /docs/setup.py:12 │\n│ for the rest │\n")
    assert d["frames"] == []


def test_a_host_nearly_out_of_memory_in_a_run_that_stops_is_a_host_oom_warning():
    d = report("[2023-04-20 19:03:19,581] [INFO] [utils.py:840:see_memory_usage] CPU Virtual Memory:  "
               "used = 29.71 GB, percent = 95.3%\n"
               "[2023-04-20 19:03:19,633] [INFO] [utils.py:831:see_memory_usage] Before initializing optimizer states\n")
    assert [(x["incident"], x["warning"]) for x in d["diagnoses"]] == [("host-oom", True)]



def test_a_statistics_fact_cites_the_readings_it_reads():
    # the host's use at 95 % is the evidence; tcmalloc's host allocations below its threshold are not
    tcmalloc = "tcmalloc: large alloc 1073741824 bytes == 0x447fa000 @  0x7f3438dcc1e7 0x59221c\n"
    d = report("[2023-04-20 19:03:19,581] [INFO] [utils.py:840:see_memory_usage] CPU Virtual Memory:  "
               "used = 29.71 GB, percent = 95.3%\n" + tcmalloc * 3 + "Killed\n")
    assert [e["line"] for e in d["diagnoses"][0]["evidence"]] == [1, 5]


@pytest.mark.parametrize("line", ["ERROR: error code -9", "Process finished with exit code -9"])
def test_an_exit_or_error_code_of_minus_9_is_a_sigkill(line: str):
    d = report(line + "\n")
    assert [e["kind"] for e in d["oom_events"]] == ["host_oom_killer"]


def test_an_oom_in_another_librarys_allocator_is_memory_outside_pytorch():
    d = report("RuntimeError: CUDA Error: out of memory at /workspace/csrc/cumem_allocator.cpp:62\n")
    ev = d["oom_events"][0]
    assert (ev["kind"], ev["message_format"]) == ("cuda_runtime_error", "library-allocator")
    assert "cumem_allocator.cpp" in ev["detail"]
    assert d["diagnoses"][0]["incident"] == "non-pytorch-memory"


# The same mechanisms where they must not fire (synthetic)

def test_one_teardown_line_says_nothing_of_the_world_size():
    d = report("WARNING:torch.distributed.elastic.multiprocessing.api:Sending process 5 closing signal SIGTERM\n")
    assert d["environment"]["world_size"] is None


@pytest.mark.parametrize("line", ["ERROR: error code -1", "ERROR: error code 9", "HTTP error code 404"])
def test_other_error_codes_are_not_kills(line: str):
    assert not report(line + "\n")["oom_events"]


def test_pytorchs_own_allocator_source_is_not_another_librarys():
    d = report("RuntimeError: CUDA error: out of memory at /pytorch/c10/cuda/CUDACachingAllocator.cpp:62\n")
    assert d["oom_events"][0]["message_format"] != "library-allocator"


def test_a_box_line_ending_in_in_without_a_function_is_no_frame():
    d = report("│ /opt/conda/lib/python3.8/site-packages/deepspeed/accelerator/cuda_accelerator.py:217 in          │\n"
               "│                                                                                                  │\n")
    assert d["frames"] == []


def test_a_backward_call_outside_a_training_step_sets_no_phase_from_the_code_line():
    text = _tb(("tools/inspect.py", "<module>", "loss.backward()"), error="")
    assert report(text)["phase"] != "backward"


# -- forms the fifth batch of real logs showed -----------------------------------------------

@pytest.mark.parametrize("log,kind,backend,size", [
    ("terminate called after throwing an instance of 'std::bad_alloc'\n  what():  std::bad_alloc\n",
     "cpu_allocator", "host", None),
    ("OSError: [WinError 8] Not enough memory resources are available to process this command\n",
     "cpu_allocator", "host", None),
    # (a runtime named in the words that has a kind of its own: XLA's)
    ("jaxlib.xla_extension.XlaRuntimeError: INTERNAL: Failed to allocate 2147483648 bytes\n",
     "xla", "XLA", 2147483648),
    ("ValueError: Not enough GPU memory to fit the model\n", "cuda_runtime_error", "CUDA", None),
    # a host allocator named with its library's prefix (Intel MKL's)
    ("RuntimeError: mkl_malloc: failed to allocate memory\n", "cpu_allocator", "host", None),
])
def test_an_error_saying_memory_could_not_be_had_is_read_on_the_side_it_names(log, kind, backend, size):
    events = report(log)["oom_events"]
    assert [(e["kind"], e["backend"], e["strength"], e["tried_to_allocate_bytes"]) for e in events] == \
        [(kind, backend, "likely", size)]


@pytest.mark.parametrize("log", [
    "RuntimeError: Failed to allocate memory for the key-value cache\n",          # no side named
    "Warning: not enough GPU memory for flash attention, falling back\n",         # not an error
    "RuntimeError: CUDA error: an illegal memory access was encountered\n",       # not capacity
    "ERROR: Unexpected bus error encountered in worker. This might be caused by insufficient shared memory (shm).\n",
    "  max_memory: not enough memory on cpu, use offload\n",                     # a setting
    "Error: if you run out of GPU memory, lower --batch_size\n",                  # advice
    "Error handling: when the host runs out of memory the job is requeued\n",    # prose
    "[2024-05-01 10:00:00] ERROR failed to allocate 1073741824 bytes of pinned host memory, using pageable memory instead\n",
    "ValueError: insufficient host memory reserved: set --cpu_offload_gb >= 10\n",
])
def test_memory_words_without_a_side_or_outside_an_error_are_not_events(log):
    assert not [e for e in report(log)["oom_events"] if (e["message_format"] or "").startswith("generic-")]


def test_enomem_as_cpp_code_formats_it_is_a_host_allocation_with_its_size():
    d = report("RuntimeError: unable to mmap 16060617592 bytes from file <ckpt/consolidated.00.pth>: "
               "Cannot allocate memory (12)\n")
    ev = d["oom_events"][0]
    assert (ev["kind"], ev["strength"], ev["tried_to_allocate_bytes"]) == ("cpu_allocator", "certain", 16060617592)
    assert d["phase"] == "model_load"     # the error names the weight file it was reading


RAY_KILL = (
    "Memory on the node ( ID: 37f3) where the task (actor ID: 658f, name=RewardActor.__init__, pid=5315, "
    "memory used=1.67GB) was running was 445.48GB / 468.75GB (0.950365), which exceeds the memory usage "
    "threshold of 0.95. Ray killed this worker (ID: 3842) because it was the most recently scheduled task. "
    "Top 10 memory users:\n"
    "PID\tMEM(GB)\tCOMMAND\n"
    "5312\t211.81\tray::ActorModelRayActor\n"
    "5313\t202.20\tray::CriticModelRayActor.init_model_from_pretrained\n")


def test_ray_memory_monitor_without_the_node_address():
    d = report(RAY_KILL)
    assert [(e["kind"], e["strength"]) for e in d["oom_events"]] == [("host_oom_killer", "certain")]
    assert d["diagnoses"][0]["incident"] == "host-oom"
    # the processes Ray names run methods that say where the job was
    assert d["phase"] == "model_load"


def test_ray_top_memory_users_table_alone_is_a_likely_host_kill():
    table = "PID     MEM(GB) COMMAND\n" + "".join(
        f"{40120 + k}   11.{k}0   ray::WorkerDict.actor_rollout_generate_sequences\n" for k in range(4))
    d = report(table)
    assert [(e["kind"], e["strength"]) for e in d["oom_events"]] == [("host_oom_killer", "likely")]
    assert d["phase"] == "eval"
    # a host kill during rollouts is not an evaluation OOM of the device
    assert [x["incident"] for x in d["diagnoses"]] == ["host-oom"]


def test_xla_memory_report_without_its_error_line():
    log = ("Program hbm requirement 31.66G:\n    global           68.03M\n"
           "    HLO temp         31.21G (100.0% utilization: Unpadded (28.96G) Padded (28.96G), 7.2% fragmentation (2.25G))\n"
           "  Largest program allocations in hbm:\n")
    ev = report(log)["oom_events"]
    assert [(e["kind"], e["strength"], e["message_format"]) for e in ev] == [("xla", "likely", "xla-memory-report")]
    # after its error line the report is part of that event, not a second one
    with_error = ("jaxlib.xla_extension.XlaRuntimeError: RESOURCE_EXHAUSTED: XLA:TPU compile permanent error. "
                  "Ran out of memory in memory space hbm. Used 31.66G of 15.48G hbm. Exceeded hbm capacity by 16.18G.\n"
                  + log)
    assert len(report(with_error)["oom_events"]) == 1


def test_nvidia_smi_table_of_ranks_sharing_gpu0_is_a_warning():
    def table(programs):
        rows = zip((62250, 62251, 62252, 62253), programs, (4903, 725, 725, 725))
        return "".join(f"|    0     {p}      C   {name:<40}{m}MiB |\n" for p, name, m in rows)
    d = report(table(["/usr/bin/python3.6"] * 4))
    first = d["diagnoses"][0]
    assert (first["incident"], first["warning"]) == ("ranks-share-gpu", True)
    # another program's small processes on the card are not this job's ranks
    other = table(["/usr/bin/python3.6", "/usr/bin/Xorg", "/usr/bin/Xorg", "/usr/bin/python3.6"])
    assert not [x for x in report(other)["diagnoses"] if x["incident"] == "ranks-share-gpu"]


@pytest.mark.parametrize("log,functions", [
    # NCCL's flight recorder: the Python stack of a failed collective
    ("[rank5]:[E627 12:26:40.073493187 ProcessGroupNCCL.cpp:629] [Rank 5] Watchdog caught collective operation "
     "timeout: WorkNCCL(SeqNum=29, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600014 "
     "milliseconds before timing out.\n"
     "[rank5]:[E627 12:26:40.074084476 ProcessGroupNCCL.cpp:664] Stack trace of the failed collective: \n"
     "#0 all_reduce from /usr/lib/python3.10/dist-packages/torch/distributed/distributed_c10d.py:2806\n"
     "#1 wrapper from /usr/lib/python3.10/dist-packages/torch/distributed/c10d_logger.py:81\n"
     "#2 save_checkpoint from /work/train.py:412\n", ["save_checkpoint", "wrapper", "all_reduce"]),
    # faulthandler's dump of a fatal error
    ("Fatal Python error: Aborted\n\n"
     "Current thread 0x00007efe708b0740 (most recent call first):\n"
     '  File "/x/lit-llama/train.py", line 166 in save_checkpoint\n'
     '  File "/x/lit-llama/train.py", line 123 in main\n'
     '  File "/x/lit-llama/train.py", line 323 in <module>\n', ["<module>", "main", "save_checkpoint"]),
])
def test_stacks_printed_innermost_first_are_read_outermost_first(log, functions):
    d = report(log)
    assert [f["function"] for f in d["frames"]] == functions
    assert d["phase"] == "checkpoint_save"


@pytest.mark.parametrize("log,world", [
    ("".join(f"[E ProcessGroupNCCL.cpp:475] [Rank {r}] Watchdog caught collective operation timeout\n"
             for r in (1, 6, 5, 7, 3, 0)), 8),
    ("Global rank 0 (PID 786) exited with code -6\nGlobal rank 1 (PID 787) exited with code -6\n", 2),
    # ranks 0 and 9 alone say little about the others
    ("[E ProcessGroupNCCL.cpp:475] [Rank 0] Watchdog caught\n[E ProcessGroupNCCL.cpp:475] [Rank 9] Watchdog caught\n", None),
])
def test_world_size_from_the_ranks_a_log_names(log, world):
    assert report(log)["environment"]["world_size"] == world


# -- forms the sixth batch of real logs showed -----------------------------------------------

def test_markdown_bold_around_an_allocator_message():
    d = report("**RuntimeError: CUDA out of memory.** Tried to allocate 1.71 GiB (GPU 0; 31.72 GiB total capacity; "
               "23.58 GiB already allocated; 1.58 GiB free; 29.08 GiB reserved in total by PyTorch)\n")
    ev = d["oom_events"][0]
    assert (ev["kind"], ev["tried_to_allocate_bytes"]) == ("cuda_caching_allocator", int(1.71 * 2**30))


def test_a_caught_bus_error_is_shared_memory_and_the_launchers_kills_are_its_cascade():
    log = ("[node1:2121 :0:7025] Caught signal 7 (Bus error: nonexistent physical address)\n"
           "2 0x0000000000068d7c ncclGroupEnd() ???:0\n"
           "[2022-12-21 10:43:17,573] [INFO] [launch.py:286:sigkill_handler] Killing subprocess 2118\n"
           "[2022-12-21 10:43:18,777] [INFO] [launch.py:286:sigkill_handler] Killing subprocess 2119\n")
    d = report(log)
    assert [x["incident"] for x in d["diagnoses"]] == ["shm-exhausted"]
    assert d["oom_events"] == []


@pytest.mark.parametrize("signal", ["Aborted", "Segmentation fault"])
def test_a_dataloader_worker_that_crashed_is_not_memory_and_is_data_loading(signal):
    log = ("Traceback (most recent call last):\n"
           '  File "/x/torch/utils/data/_utils/signal_handling.py", line 66, in handler\n'
           "    _error_if_any_worker_fails()\n"
           f"RuntimeError: DataLoader worker (pid 2256) is killed by signal: {signal}.\n")
    d = report(log)
    assert [f["kind"] for f in d["failures"]] == ["dataloader_worker_crashed"]
    assert d["diagnoses"] == [] and d["phase"] == "data_loading"


def test_a_dataloader_worker_killed_is_data_loading_whatever_frame_the_main_process_was_in():
    log = ("Traceback (most recent call last):\n"
           '  File "/x/torch/nn/modules/conv.py", line 320, in forward\n'
           "    self.padding, self.dilation, self.groups)\n"
           '  File "/x/torch/utils/data/dataloader.py", line 274, in handler\n'
           "    _error_if_any_worker_fails()\n"
           "RuntimeError: DataLoader worker (pid 2064) is killed by signal: Killed.\n")
    assert report(log)["phase"] == "data_loading"


def test_an_exception_glued_after_terminal_padding_is_its_own_line():
    log = (" return torch._C._nn.cross_entropy_loss(input, target, weight)" + " " * 60
           + "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 250.00 MiB (GPU 1; 31.75 GiB total "
           "capacity; 30.35 GiB already allocated; 209.75 MiB free; 30.55 GiB reserved in total by PyTorch)\n")
    d = report(log)
    assert d["oom_events"][0]["tried_to_allocate_bytes"] == 250 * 2**20
    assert d["phase"] == "forward"      # the code line glued before it


def test_a_loops_own_validation_code_is_eval():
    log = ("Traceback (most recent call last):\n"
           '  File "scripts/train.py", line 290, in train\n'
           "    val_loss = loss_fn(input=net_out, target=labels_val, K=topk, weight=None)\n"
           '  File "scripts/loss.py", line 88, in _bootstrap_xentropy_single\n'
           "    log_p = log_p[target.view(n * h * w, 1).repeat(1, c) >= 0]\n"
           "RuntimeError: CUDA out of memory. Tried to allocate 304.00 MiB (GPU 0; 10.72 GiB total capacity; "
           "9.30 GiB already allocated; 226.62 MiB free; 59.54 MiB cached)\n")
    assert report(log)["phase"] == "eval"
    assert report(log.replace("val_loss =", "loss =").replace("labels_val", "labels"))["phase"] != "eval"


def test_a_cuda_runtime_oom_from_a_call_that_only_makes_a_context_points_to_shared_gpus():
    log = ("Traceback (most recent call last):\n"
           '  File "/x/ray/train/torch/config.py", line 118, in _shutdown_torch\n'
           "    torch.cuda.empty_cache()\n"
           '  File "/x/torch/cuda/memory.py", line 114, in empty_cache\n'
           "    torch._C._cuda_emptyCache()\n"
           "RuntimeError: CUDA error: out of memory\n")
    assert report(log)["diagnoses"][0]["incident"] == "ranks-share-gpu"


def test_nccl_out_of_memory_on_several_devices_is_one_event_per_device():
    log = "".join(f"node1:{2999600 + d}:3004400 [{d}] include/alloc.h:228 NCCL WARN Cuda failure 2 'out of memory'\n"
                  for d in (0, 4, 3, 4))
    events = report(log)["oom_events"]
    assert sorted(e["device_index"] for e in events) == [0, 3, 4]
    # an echo that names no device, printed before the device's own line, is that device's
    echo = "NCCL error: unhandled cuda error, NCCL version 2.18.1\nLast error:\nCuda failure 2 'out of memory'\n"
    events = report(echo + log)["oom_events"]
    assert sorted(e["device_index"] for e in events) == [0, 3, 4]


def test_a_frame_wrapped_at_a_space_is_rejoined():
    log = ("Traceback (most recent call last):\n"
           '  File "/x/pytorch_lightning/trainer/trainer.py", line\n'
           "1096, in test\n"
           "    self.fit(model)\n"
           "RuntimeError: trying to initialize the default process group twice!\n")
    d = report(log)
    assert [f["function"] for f in d["frames"]] == ["test"]
    assert d["phase"] == "eval"
    # the code under a rejoined frame is its code, and the row it was wrapped onto no frame of its own
    assert [f["code"] for f in d["frames"]] == ["self.fit(model)"]


def test_a_frame_wrapped_into_a_column_is_rejoined():
    # (a logger that wraps its message in an indented column breaks a frame at a word: "File"
    # alone, then the quoted path, itself cut where the row was full)
    col = " " * 29
    log = ("[01/23/25 10:01:02] ERROR    Command failed with an unexpected error.\n"
           + col + "Traceback (most recent call last):\n"
           + col + "  File\n"
           + col + '"/home/user/site-packages/fairseq2/recipes/__init_\n'
           + col + '_.py", line 40, in main\n'
           + col + "    exit_code = _run()\n"
           + col + "  File\n"
           + col + '"/home/user/site-packages/torch/optim/adamw.py", line 40, in step\n'
           + col + "    exp_avg = torch.zeros_like(p)\n"
           + col + "RuntimeError: boom\n")
    frames = report(log)["frames"]
    assert [(f["file"].rsplit("/", 1)[-1], f["function"], f["code"]) for f in frames] == [
        ("__init__.py", "main", "exit_code = _run()"), ("adamw.py", "step", "exp_avg = torch.zeros_like(p)")]


def test_a_code_line_under_a_frame_cut_after_in_is_not_its_function():
    log = ("Traceback (most recent call last):\n"
           '  File "/x/torch/distributed/launch.py", line 326, in\n'
           "    sigkill_handler(signal.SIGTERM, None)  # not coming back\n"
           "RuntimeError: boom\n")
    assert all(not f["function"].startswith("sigkill_handler") for f in report(log)["frames"])


@pytest.mark.parametrize("log,phase", [
    # a script reading its training data is data loading
    (("INFO:__main__:Loading prepared training docs from ./train_docs.json\n"
      "Killing subprocess 5571\nKilling subprocess 5572\n"), "data_loading"),
    # the line ipython marks with an arrow tells the phase
    (("    516         return torch.empty(A.shape[:-1])\n"
      "--> 520 output = torch.nn.functional.linear(A, B.t(), bias)\n"
      "    522 # 3. Save state\n"
      "    523 ctx.state = quant_state\n\n"
      "OutOfMemoryError: HIP out of memory. Tried to allocate 224.00 MiB. GPU \n"), "forward"),
    # ... and the line rich's boxed traceback marks with "❱" (three context lines below it, as
    # rich prints them), its frame's path cut off above
    (("│ _attention                                                   │\n"
      "│    628 │   │   )                                              │\n"
      "│ ❱  629 │   │   attention_probs = attention_scores.softmax(dim=-1) │\n"
      "│    630 │   │                                                  │\n"
      "│    631 │   │   # cast back to the original dtype              │\n"
      "│    632 │   │   attention_probs = attention_probs.to(v.dtype)  │\n"
      "╰──────────────────────────────────────────────────────────────╯\n"
      "OutOfMemoryError: CUDA out of memory. Tried to allocate 1024.00 MiB (GPU 0; 8.00 GiB total capacity; "
      "6.19 GiB already allocated; 0 bytes free; 6.68 GiB reserved in total by PyTorch)\n"), "forward"),
    (("│ ❱ 280 │   loss.backward()                                        │\n"
      "│   281 │   step += 1                                              │\n"
      "│   282 │   if step % 10 == 0:                                     │\n"
      "│   283 │   │   log(step)                                          │\n"
      "╰──────────────────────────────────────────────────────────────╯\n"
      "OutOfMemoryError: CUDA out of memory. Tried to allocate 1024.00 MiB (GPU 0; 8.00 GiB total capacity; "
      "6.19 GiB already allocated; 0 bytes free; 6.68 GiB reserved in total by PyTorch)\n"), "backward"),
    # the task ray killed names the phase before the largest processes
    (("Memory on the node (IP: 10.0.0.1, ID: 1) where the task (task ID: 2, name=Trainer.save_checkpoint, pid=7, "
      "memory used=2.80GB) was running was 479.24GB / 503.75GB (0.951345), which exceeds the memory usage "
      "threshold of 0.95. Ray killed this worker (ID: 3) because it was the most recently scheduled task.\n"
      "PID\tMEM(GB)\tCOMMAND\n"
      "8\t28.07\tray::WorkerDict.actor_rollout_generate_sequences\n"), "checkpoint_save"),
    # gathering the policy for generation is generation
    (("[rank2]:   File \"/x/open_instruct/model_utils.py\", line 455, in unwrap_model_for_generation\n"
      "[rank2]:     with deepspeed.zero.GatheredParameters(model.parameters()):\n"
      "[rank2]:   File \"/x/deepspeed/runtime/zero/partition_parameters.py\", line 1143, in all_gather\n"
      "[rank2]:     return self._all_gather(param_list, async_op=async_op, hierarchy=hierarchy)\n"), "eval"),
])
def test_phase_from_the_evidence_a_fragment_holds(log, phase):
    assert report(log)["phase"] == phase


# -- what the mechanisms above must leave alone ---------------------------------------------

def test_markdown_bold_is_only_a_pair_at_the_start_of_a_line():
    from oomdoctor.read.normalise import normalise
    assert normalise("**kwargs)\n")[0].text == "**kwargs)"
    assert normalise("    return f(*args, **kwargs)\n")[0].text == "    return f(*args, **kwargs)"


def test_padding_without_an_exception_after_it_is_not_a_cut():
    from oomdoctor.read.normalise import normalise
    line = "  0%|" + " " * 20 + "| 0/459 [00:00<?, ?it/s]" + " " * 10 + "loss is ValueError-free"
    assert [ln.text for ln in normalise(line)] == [line]


def test_a_numbered_line_outside_a_stack_is_not_a_frame():
    d = report("#1 best model from run_3.py:12 picked\nRuntimeError: CUDA error: out of memory\n")
    assert d["frames"] == []


def test_loading_a_model_from_a_path_is_not_reading_training_data():
    log = ("Loading model from /ckpt/model-00001.safetensors\n"
           "RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB (GPU 0; 79.15 GiB total capacity; "
           "77.00 GiB already allocated; 1.00 GiB free; 77.50 GiB reserved in total by PyTorch)\n")
    assert report(log)["phase"] != "data_loading"


def test_the_context_below_a_marked_line_never_ran():
    log = ("│ ❱ 279 │   batch = {k: v.to(dev) for k, v in batch.items()}       │\n"
           "│   280 │   loss.backward()                                        │\n"
           "╰──────────────────────────────────────────────────────────────╯\n"
           "OutOfMemoryError: CUDA out of memory. Tried to allocate 1024.00 MiB (GPU 0; 8.00 GiB total capacity; "
           "6.19 GiB already allocated; 0 bytes free; 6.68 GiB reserved in total by PyTorch)\n")
    assert report(log)["phase"] != "backward"


def test_rich_code_is_the_line_without_its_padding_and_box_edge():
    from oomdoctor.parsers.traceback import RICH_CODE, rich_code
    m = RICH_CODE.match("│ ❱  629 │   │   probs = scores.softmax(dim=-1)        │")
    assert rich_code(m) == "│   probs = scores.softmax(dim=-1)"
    assert rich_code(RICH_CODE.match("│   630 │   x = a | b   │")) == "x = a | b"
    assert rich_code(RICH_CODE.match("│   630 │   x = a | b")) == "x = a | b"


def test_a_shell_prompt_arrow_is_not_a_marked_code_line():
    log = ("❱ python train.py --loss cross_entropy\n"
           "loading\n"
           "step 1\n"
           "step 2\n"
           "OutOfMemoryError: CUDA out of memory. Tried to allocate 1024.00 MiB (GPU 0; 8.00 GiB total capacity; "
           "6.19 GiB already allocated; 0 bytes free; 6.68 GiB reserved in total by PyTorch)\n")
    assert report(log)["phase"] != "forward"


def test_an_ipython_arrow_far_above_the_error_says_nothing():
    log = ("--> 520 output = torch.nn.functional.linear(A, B.t(), bias)\n" + "x = 1\n" * 14
           + "OutOfMemoryError: HIP out of memory. Tried to allocate 224.00 MiB. GPU \n")
    assert report(log)["phase"] != "forward"


NEW_OOM = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of "
           "79.15 GiB of which 1.00 GiB is free.\n")


@pytest.mark.parametrize("frames", [
    # validation names in an outer frame's code do not hide a backward pass
    ('  File "train.py", line 90, in main\n'
     "    train_loss, val_loss = run_epoch(model, train_loader, val_loader)\n"
     '  File "train.py", line 40, in run_epoch\n'
     "    loss.backward()\n"
     '  File "/x/torch/autograd/__init__.py", line 251, in backward\n'
     "    Variable._execution_engine.run_backward(\n"),
    # a training function named for rollouts is not generation
    ('  File "ppo.py", line 77, in train_on_rollout\n'
     "    loss.backward()\n"),
])
def test_a_backward_pass_is_not_taken_for_evaluation_or_generation(frames):
    assert report("Traceback (most recent call last):\n" + frames + NEW_OOM)["phase"] == "backward"


def test_a_cuda_runtime_oom_in_a_forward_pass_is_not_a_context_only_call():
    log = ("Traceback (most recent call last):\n"
           '  File "/x/torch/nn/modules/linear.py", line 114, in forward\n'
           "    return F.linear(input, self.weight, self.bias)\n"
           "RuntimeError: CUDA error: out of memory\n")
    assert not [x for x in report(log)["diagnoses"] if x["incident"] == "ranks-share-gpu"]


# -- forms the seventh batch of real logs showed ---------------------------------------------

def test_the_windows_paging_file_error_in_any_language():
    d = report('OSError: [WinError 1455] 页面文件太小，无法完成操作。 Error loading "D:\\\\torch\\\\lib\\\\cudnn_cnn_infer64_8.dll"\n')
    assert [(e["kind"], e["message_format"]) for e in d["oom_events"]] == [("cpu_allocator", "windows-paging-file")]


def test_the_allocation_hint_alone_is_the_tail_of_an_out_of_memory_error():
    log = ("E    1578 xla_util.cc:76]      XLA label: %reshape.152469 = bf16[512,16,3072] reshape(%fusion.41543)\n"
           "E    1578 xla_util.cc:76]  [[{{node XRTCompile}}]]\n"
           "E    1578 xla_util.cc:76] Hint: If you want to see a list of allocated tensors when OOM happens, add "
           "report_tensor_allocations_upon_oom to RunOptions for current allocation info.\n")
    ev = report(log)["oom_events"]
    assert [(e["kind"], e["strength"]) for e in ev] == [("xla", "likely")]
    # with its error line the hint belongs to that event
    full = ("tensorflow.python.framework.errors_impl.ResourceExhaustedError: OOM when allocating tensor with shape"
            "[8,1024,1024] and type float on /job:localhost/replica:0/task:0/device:GPU:0 by allocator GPU_0_bfc\n"
            "Hint: If you want to see a list of allocated tensors when OOM happens, add report_tensor_allocations_upon_oom "
            "to RunOptions for current allocation info.\n")
    assert [e["message_format"] for e in report(full)["oom_events"]] == ["tf-oom-when-allocating"]


RICH = (
    "│ /data/llm/alpaca-lora/finetune.py:280 in train                                   │\n"
    "│                                                                                  │\n"
    "│   278 │   trainer.train(resume_from_checkpoint=resume_from_checkpoint)           │\n"
    "│   279 │                                                                          │\n"
    "│ ❱ 280 │   model.save_pretrained(output_dir)                                      │\n"
    "OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB (GPU 0; 23.65 GiB total capacity; "
    "21.00 GiB already allocated; 1.00 GiB free; 21.50 GiB reserved in total by PyTorch)\n")


def test_the_line_rich_marks_in_a_box_is_the_frames_code():
    d = report(RICH)
    assert [(f["function"], f["code"]) for f in d["frames"]] == [("train", "model.save_pretrained(output_dir)")]
    assert d["phase"] == "checkpoint_save"
    # the source context around it is code, not a resume announced
    assert "ckpt-load" not in [x["incident"] for x in d["diagnoses"]]


def test_a_later_stage_ends_the_save_before_a_host_kill():
    log = ("2024-10-17 19:11:05,205 - mmdet - INFO - Saving checkpoint at 3 epochs\n"
           "Evaluating bboxes of pts_bbox\n"
           "Initializing nuScenes detection evaluation\n"
           "Filtering ground truth annotations\n"
           "ERROR:torch.distributed.elastic.multiprocessing.api:failed (exitcode: -9) local_rank: 0 (pid: 365975) of binary: x\n")
    d = report(log)
    assert d["phase"] == "eval"
    assert [x["incident"] for x in d["diagnoses"]][:1] == ["host-oom"]
    assert "ckpt-save-gather" not in [x["incident"] for x in d["diagnoses"]]
    # without the evaluation the save is what was going on
    saving = report(log.replace("Evaluating bboxes of pts_bbox\nInitializing nuScenes detection evaluation\n", ""))
    assert saving["phase"] == "checkpoint_save"




# -- forms the eighth batch of real logs showed ----------------------------------------------

@pytest.mark.parametrize("code,crashed", [("1", True), ("-6", True), ("-9", False), ("137", False)])
def test_a_dataloader_worker_exit_code_tells_a_crash_from_a_kill(code, crashed):
    d = report(f"RuntimeError: DataLoader worker (pid 1166833) exited unexpectedly with exit code {code}. Details are lost "
               "due to multiprocessing.\n")
    assert ([f["kind"] for f in d["failures"]] == ["dataloader_worker_crashed"]) is crashed
    assert bool(d["oom_events"]) is not crashed


def test_markdown_bold_inside_words_of_a_pasted_message():
    d = report("orch.cuda.OutOfMemoryError: C**UDA out of memory. Tried to allocate 1**72.00 MiB (GPU 0; 23.68 GiB total "
               "capacity; 18.08 GiB already allocated; 73.00 MiB free; 22.38 GiB reserved in total by PyTorch)\n")
    assert d["oom_events"][0]["tried_to_allocate_bytes"] == 172 * 2**20


def test_tensorflow_on_rocm_names_its_allocation_failure_by_number():
    d = report("2019-01-08 19:06:11.303639: E tensorflow/stream_executor/rocm/rocm_driver.cc:601] failed to allocate "
               "7.35G (7889485824 bytes) from device: hipError_t(1002)\n")
    assert [(e["kind"], e["tried_to_allocate_bytes"]) for e in d["oom_events"]] == [("hip", 7889485824)]
    # another HIP error number is not an allocation failure
    assert report("failed to allocate 7.35G (7889485824 bytes) from device: hipError_t(1011)\n")["oom_events"] == []


def test_another_tools_process_table_and_actor_constructors_say_nothing():
    d = report("PID     MEM(GB) COMMAND  CPU%\n4100    41.20   python train.py  99\n")
    assert d["oom_events"] == []
    d = report("ray.exceptions.RayActorError: The actor died unexpectedly (name=Trainer.__init__, pid=7)\n")
    assert d["phase"] is None


def test_several_workers_one_of_which_exited_with_its_own_code():
    d = report("DataLoader worker (pid(s) 7715, 7716) exited unexpectedly\n"
               "RuntimeError: DataLoader worker (pid 7715) exited unexpectedly with exit code 1.\n")
    assert d["oom_events"] == [] and [f["kind"] for f in d["failures"]] == ["dataloader_worker_crashed"]


_SIGTERMS = ("W0908 17:08:01.837000 3889263 site-packages/torch/distributed/elastic/multiprocessing/api.py:900] "
             "Sending process 3889428 closing signal SIGTERM\n"
             "W0908 17:08:02.668000 3889263 site-packages/torch/distributed/elastic/multiprocessing/api.py:900] "
             "Sending process 3889429 closing signal SIGTERM\n")


def test_a_checkpoint_recompute_mismatch_is_read_from_its_body_lines():
    d = report("[rank0]: tensor at position 12:\n"
               "[rank0]: saved metadata: {'shape': torch.Size([5120]), 'dtype': torch.bfloat16, 'device': device(type='cuda', index=0)}\n"
               "[rank0]: recomputed metadata: {'shape': torch.Size([0]), 'dtype': torch.bfloat16, 'device': device(type='cuda', index=0)}\n"
               + _SIGTERMS)
    assert [f["kind"] for f in d["failures"] if not f["secondary"]] == ["checkpoint_recompute_mismatch"]
    # the launcher's "a rank died without a Python exception" is that failure's cascade
    assert all(ev["symptom"] for ev in d["oom_events"])
    assert d["diagnoses"] == []
    assert oomdoctor.diagnose("torch.utils.checkpoint.CheckpointError: torch.utils.checkpoint: Recomputed values for "
                              "the following tensors have different metadata than during the forward pass.\n"
                              ).failures[0].kind == "checkpoint_recompute_mismatch"
    # a script printing its own tensors' metadata is no failure
    assert report("saved metadata: {'shape': torch.Size([5120]), 'dtype': torch.bfloat16}\n")["failures"] == []


@pytest.mark.parametrize("before, killed", [
    ("Segmentation fault (core dumped)\n", False),                 # a rank's own death, not memory
    ("", True),                                                    # nothing before: possibly a kill
    # what the surviving ranks see is no cause: the silent death may still be a kill
    ("[rank1]:[E ProcessGroupNCCL.cpp:607] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=1, "
     "OpType=ALLREDUCE) ran for 600000 milliseconds before timing out.\n", True),
])
def test_survivors_stopped_after_a_ranks_own_failure_are_its_cascade(before, killed):
    d = report(before + _SIGTERMS)
    weak = [ev for ev in d["oom_events"] if ev["message_format"] == "torchrun-survivors-stopped"]
    assert weak and all(not ev["symptom"] for ev in weak) == killed
    assert bool(d["diagnoses"]) == killed


def test_an_allocator_message_whose_case_was_lost_is_read():
    d = report("cuda out of memory. tried to allocate 30.00 mib (gpu 0; 8.00 gib total capacity; 7.04 gib already "
               "allocated; 0 bytes free; 7.28 gib reserved in total by pytorch)\n")
    ev = d["oom_events"][0]
    assert ev["kind"] == "cuda_caching_allocator"
    assert ev["tried_to_allocate_bytes"] == 30 * 2**20 and ev["total_capacity_bytes"] == 8 * 2**30
    assert ev["evidence"][0]["text"].startswith("cuda out of memory")   # the evidence as posted
    d = report("torch.cuda.outofmemoryerror: cuda out of memory. tried to allocate 30.00 mib (gpu 0; 8.00 gib total "
               "capacity; 7.04 gib already allocated; 0 bytes free; 7.28 gib reserved in total by pytorch)\n")
    assert d["oom_events"][0]["exception"] == "torch.cuda.OutOfMemoryError"
    # only a line whose case was lost as a whole: one typed in mixed case is not the allocator's
    assert report("My note: CUDA out of memory. tried to allocate 30.00 mib again\n")["oom_events"] == []


def test_metal_command_buffer_out_of_memory_is_a_device_oom():
    d = report("libc++abi: terminating due to uncaught exception of type std::runtime_error: [METAL] Command buffer "
               "execution failed: Insufficient Memory (00000008:kIOGPUCommandBufferCallbackErrorOutOfMemory)\n")
    assert [(e["kind"], e["message_format"]) for e in d["oom_events"]] == [("mps", "metal-command-buffer")]
    assert report("[METAL] Command buffer execution failed: Internal Error (0000000e:Internal Error)\n")["oom_events"] == []


def test_a_console_scripts_entry_point_names_the_installed_version():
    d = report("Traceback (most recent call last):\n"
               '  File "/usr/local/bin/torchrun", line 33, in <module>\n'
               "    sys.exit(load_entry_point('torch==2.1.0a0+fe05266', 'console_scripts', 'torchrun')())\n")
    assert d["environment"]["torch_version"] == "2.1.0a0"
    # another package's console script says nothing of torch; one without a version, nothing
    other = report("Traceback (most recent call last):\n"
                   '  File "/usr/local/bin/deepspeed", line 33, in <module>\n'
                   "    sys.exit(load_entry_point('deepspeed==0.14.0', 'console_scripts', 'deepspeed')())\n"
                   "    sys.exit(load_entry_point('torch', 'console_scripts', 'torchrun')())\n")
    assert (other["environment"]["torch_version"], other["environment"]["deepspeed_version"]) == (None, "0.14.0")


def test_phase_from_the_call_in_progress_and_native_save_frames():
    tb = ("Traceback (most recent call last):\n"
          '  File "/x/site-packages/transformers/trainer.py", line 2536, in _inner_training_loop\n'
          "    tr_loss_step = self.training_step(model, inputs, num_items_in_batch)\n"
          '  File "/x/site-packages/transformers/trainer.py", line 3809, in training_step\n'
          "    loss = self.compute_loss(model, inputs, num_items_in_batch=num_items_in_batch)\n")
    assert report(tb)["phase"] == "forward"
    seg = (" 93: !!!!!!! Segfault encountered !!!!!!!\n"
           ' 93:   File "<unknown>", line 0, in mz_zip_writer_add_mem_ex_v2\n'
           ' 93:   File "<unknown>", line 0, in caffe2::serialize::PyTorchStreamWriter::writeRecord(std::string const&, '
           'void const*, unsigned long, bool)\n')
    assert report(seg)["phase"] == "checkpoint_save"
    # other native frames in a crash say nothing of a save
    other = seg.replace("caffe2::serialize::PyTorchStreamWriter::writeRecord", "at::native::copy_")
    assert report(other)["phase"] != "checkpoint_save"


@pytest.mark.parametrize("flag, offload", [("'--adam_offload']", "optimizer"), ("'--zero_stage', '3']", None)])
def test_openrlhf_adam_offload_flag(flag, offload):
    d = report(f"[ERROR] [launch.py:325:sigkill_handler] ['/usr/bin/python', '-u', '-m', 'openrlhf.cli.train_sft', {flag} "
               "exits with return code = 1\n")
    assert d["environment"]["offload"] == offload


def test_paddlepaddles_allocator_failure_is_a_device_oom_with_its_figures():
    d = report("ResourceExhaustedError: \n\n"
               "Out of memory error on GPU 0. Cannot allocate 172.000000MB memory on GPU 0, 23.486572GB memory has been "
               "allocated and available memory is only 167.062500MB.\n")
    (ev,) = d["oom_events"]
    # Paddle raises it when cudaMalloc fails: the CUDA runtime's out of memory
    assert (ev["kind"], ev["device_index"], ev["message_format"]) == ("cuda_runtime_error", 0, "paddle-allocator")
    assert ev["tried_to_allocate_bytes"] == 172 * 2**20 and ev["free_bytes"] == int(167.0625 * 2**20)
    # its advice is not a failure
    assert report("Please check whether there is any other process using GPU 0.\n")["oom_events"] == []


@pytest.mark.parametrize("function, phase", [("_eval_loop", "eval"), ("_train_loop", None), ("__evaluate", "eval")])
def test_a_private_evaluation_method_is_evaluation(function, phase):
    tb = ("Traceback (most recent call last):\n"
          '  File "/x/composer/trainer/trainer.py", line 1766, in fit\n'
          "    self._train_loop()\n"
          f'  File "/x/composer/trainer/trainer.py", line 2724, in {function}\n'
          "    self._original_model.update_metric(\n")
    assert report(tb)["phase"] == phase


@pytest.mark.parametrize("size, warned", [(6325288960, True), (1610612736, False)])
def test_tcmallocs_large_allocation_is_host_pressure_from_4_gib(size, warned):
    d = report("Loading dataset...\n"
               f"tcmalloc: large alloc {size} bytes == 0x447fa000 @  0x7f3438dcc1e7 0x59221c 0x4ca6f4\n")
    assert [s["host_request_bytes"] for s in d["memory_samples"]] == [size]
    assert [(x["incident"], x["warning"]) for x in d["diagnoses"]] == ([("host-oom", True)] if warned else [])


def test_a_log_whose_only_oom_is_a_symptom_says_so():
    from oomdoctor.report.text import render_text
    report_ = oomdoctor.diagnose("RuntimeError: CUDA out of memory. Tried to allocate 67109892.00 GiB (GPU 0; "
                                 "79.35 GiB total capacity; 1.00 GiB already allocated; 70.00 GiB free)\n")
    text = render_text(report_)
    first = text.splitlines()[0]
    assert first.startswith("Not an out-of-memory failure") and "survived" not in first
    # the run ended on it: a failure all the same (exit code 1, a failed record in a scan)
    assert report_.found_anything


def test_a_frame_cut_inside_its_path_at_the_start_of_a_paste_is_read():
    d = report('efficient_cross_entropy.py", line 108, in forward\n'
               "    grad_in_feat = torch.zeros_like(in_feat)\n"
               "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 17.37 GiB. GPU 0 has a total capacity of "
               "31.50 GiB of which 9.48 GiB is free.\n")
    assert [(f["file"], f["function"]) for f in d["frames"]] == [("efficient_cross_entropy.py", "forward")]
    assert d["phase"] == "forward"
    # further down a log, such a line is no frame: only a paste's first lines are cut so
    assert report("x\ny\nz\nw\n" + 'a.py", line 1, in forward\n')["frames"] == []


@pytest.mark.parametrize("function, phase", [("wrapped_fn", "model_load"), ("_partition_param", "model_load"),
                                             ("_all_gather", None)])
def test_zero_init_building_the_model_is_model_load(function, phase):
    tb = ('[rank0]:   File "/x/deepspeed/runtime/zero/partition_parameters.py", line 240, in ' + function + "\n"
          "[rank0]:     tensor: Tensor = fn(*args, **kwargs)\n"
          "[rank0]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 130.00 MiB. GPU 0 has a total "
          "capacity of 23.65 GiB of which 67.81 MiB is free.\n")
    assert report(tb)["phase"] == phase


@pytest.mark.parametrize("free, request_, symptom", [
    ("66.43 GiB", "20.00 MiB", True),      # the device had room: something else refused it
    ("500.00 MiB", "20.00 MiB", False),    # under a GiB free: a device nearly full
    ("2.00 GiB", "1.00 GiB", False),       # room for twice the request only: pressure
])
def test_an_oom_with_the_device_far_from_full_is_not_memory_pressure(free, request_, symptom):
    d = report(f"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate {request_}. GPU 7 has a total capacity "
               f"of 79.11 GiB of which {free} is free. Including non-PyTorch memory, this process has 0 bytes memory in "
               "use. Of the allocated memory 8.51 GiB is allocated by PyTorch, and 856.16 MiB is reserved by PyTorch "
               "but unallocated.\n")
    (ev,) = d["oom_events"]
    assert bool(ev["symptom"]) == symptom
    assert bool(d["diagnoses"]) != symptom


@pytest.mark.parametrize("frame, phase", [
    ("/x/bitsandbytes/nn/modules.py:296, in Params4bit._quantize(self, device)", "model_load"),
    ("/x/megatron/core/transformer/spec_utils.py:119, in build_module(spec, *args, **kwargs)", "model_load"),
    ("/x/transformer_engine/pytorch/module/grouped_linear.py:696, in __init__(self)", "model_load"),
    ("/x/transformer_engine/pytorch/module/grouped_linear.py:696, in forward(self)", "forward"),
])
def test_layers_built_or_quantized_as_they_are_placed_is_model_load(frame, phase):
    assert report(f"File {frame}\nRuntimeError: CUDA driver error: out of memory\n")["phase"] == phase


@pytest.mark.parametrize("log", [
    # a process limit the message names (set_per_process_memory_fraction): pressure under that limit
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB. GPU 0 has a total capacity of 79.11 GiB "
    "of which 66.43 GiB is free. 10.00 GiB allowed; 9.99 GiB already allocated.\n",
    # XLA's "free" is not what it can hand out in one piece ("reservable")
    "RESOURCE_EXHAUSTED: Error allocating device buffer: Attempting to reserve 512.00M at the bottom of memory. That was "
    "not possible. There are 12.00G free, 0B reserved, and 300.00M reservable.\n",
])
def test_room_on_the_device_is_read_only_from_pytorchs_allocator_without_a_limit(log):
    events = report(log)["oom_events"]
    assert events and not any(e["symptom"] for e in events)


def test_ipython_8_frames_take_their_code_from_the_arrow_not_the_context_lines():
    log = ("RuntimeError                              Traceback (most recent call last)\n"
           "Cell In[11], line 2\n"
           "      1 #torch.cuda.empty_cache()\n"
           "----> 2 trainer_stats = trainer.train()\n"
           "\n"
           "File ~/envs/x/lib/python3.11/site-packages/unsloth/models/gradient_checkpointing.py:145, in "
           "Offloaded_Checkpointer.forward(ctx, forward_function, hidden_states, *args)\n"
           "    142 @staticmethod\n"
           "    144 def forward(ctx, forward_function, hidden_states, *args):\n"
           '--> 145     saved_hidden_states = hidden_states.to("cpu", non_blocking = True)\n'
           "    146     with torch.no_grad():\n"
           "\n"
           "RuntimeError: CUDA error: out of memory\n")
    d = report(log)
    assert [f["code"] for f in d["frames"]] == ["trainer_stats = trainer.train()",
                                                'saved_hidden_states = hidden_states.to("cpu", non_blocking = True)']
    # a commented-out call in a cell's context is not the call that ran: no context-only call
    assert [x["incident"] for x in d["diagnoses"]][:1] == ["pinned-memory"]


# a traceback cut after its first frame: where the run was comes from what came before
_CUT_SFT = ("Traceback (most recent call last):\n"
            '  File "/x/swift/cli/sft.py", line 5, in <module>\n'
            "    sft_main()\n")


@pytest.mark.parametrize("bar, phase", [
    ("Val:  21%|█████▊          | 90/428 [01:53<04:33,  1.24it/s]", "eval"),    # the evaluation pass under way
    ("Val: 100%|████████████████| 428/428 [08:53<00:00,  1.24it/s]", None),     # finished: its stage is over
    ("Train:   3%|█               | 60/1938 [3:14:25<100:20:25, 186.2s/it]", None),
])
def test_a_progress_bar_named_for_evaluation_marks_the_evaluation_pass(bar, phase):
    assert report(bar + "\n" + _CUT_SFT)["phase"] == phase


def test_an_ipython_frame_without_source_takes_no_other_frames_arrow():
    log = ("ValueError                                Traceback (most recent call last)\n"
           "File <string>:124, in __init__(self, output_dir, overwrite_output_dir)\n"
           "\n"
           "File ~/x/transformers/training_args.py:1500, in TrainingArguments.__post_init__(self)\n"
           "   1498 if self.bf16:\n"
           "-> 1500     raise ValueError(\"bf16 requires Ampere\")\n"
           "ValueError: bf16 requires Ampere\n")
    frames = report(log)["frames"]
    assert [(f["function"], f["code"]) for f in frames] == [
        ("__init__", None), ("TrainingArguments.__post_init__", 'raise ValueError("bf16 requires Ampere")')]


def test_an_evaluation_bar_on_lines_of_its_own_ends_with_its_stage():
    tb = _CUT_SFT
    val = "".join(f"Val: {p:3d}%|███ | {p}/100 [00:10<00:10,  1.24it/s]\n" for p in (20, 50, 100))
    assert report(val + tb)["phase"] is None                                        # finished
    assert report(val[:-len(val.splitlines()[-1]) - 1] + tb)["phase"] == "eval"     # under way
    assert report(val + "Train:  51%|█████ | 51/100 [01:00<01:00, 1.0it/s]\n" + tb)["phase"] is None


@pytest.mark.parametrize("device, alloc, host", [
    ("/job:localhost/replica:0/task:0/device:CPU:0", "cpu", True),
    ("/job:localhost/replica:0/task:0/device:CPU:0", "mklcpu", True),
    ("/job:localhost/replica:0/task:0/device:GPU:0", "GPU_0_bfc", False),
])
def test_a_tensorflow_oom_on_the_cpu_device_is_a_host_allocation(device, alloc, host):
    d = report(f"Resource exhausted: OOM when allocating tensor with shape[1024,50257] and type float on {device} "
               f"by allocator {alloc}\n")
    ev = d["oom_events"][0]
    assert ev["kind"] == ("cpu_allocator" if host else "xla") and ev["backend"] == "TF"
    assert ev["tried_to_allocate_bytes"] == 1024 * 50257 * 4
    assert ev["host_bytes"] == (1024 * 50257 * 4 if host else None)
    assert (d["diagnoses"][0]["incident"] == "host-oom") == host


@pytest.mark.parametrize("alloc, host", [("cpu", True), ("GPU_0_bfc", False)])
def test_a_tensorflow_cpu_allocator_running_out_is_a_host_allocation(alloc, host):
    d = report(f"2019-03-01 10:00:00.000000: W tensorflow/core/common_runtime/bfc_allocator.cc:267] Allocator ({alloc}) "
               "ran out of memory trying to allocate 4.00GiB.  Current allocation summary follows.\n")
    ev = d["oom_events"][0]
    assert ev["kind"] == ("cpu_allocator" if host else "xla") and ev["backend"] == "TF"
    assert ev["host_bytes"] == (4 * 2**30 if host else None)


def test_the_kernel_killing_a_dataloader_worker_is_that_workers_event():
    dl = "RuntimeError: DataLoader worker (pid 629) is killed by signal: Killed.\n"
    kernel = ("Memory cgroup out of memory: Killed process {pid} (python) total-vm:14119556kB, anon-rss:6538204kB, "
              "file-rss:80652kB, shmem-rss:16kB, UID:0 pgtables:13432kB oom_score_adj:0\n")
    d = report(dl + "\n" + kernel.format(pid=629))
    assert [ev["kind"] for ev in d["oom_events"]] == ["dataloader_killed"]
    ev = d["oom_events"][0]
    assert [e["line"] for e in ev["evidence"]] == [1, 3] and ev["host_bytes"] == 6538204 * 1024
    assert d["phase"] == "data_loading"
    # another process killed: two events
    d = report(dl + "\n" + kernel.format(pid=630))
    assert sorted(ev["kind"] for ev in d["oom_events"]) == ["dataloader_killed", "host_oom_killer"]


@pytest.mark.parametrize("line", [
    "RuntimeError: CUDA out of memory. Please reduce the batch size",          # another library's wording
    "JutofMemoryError: CUDA out of memory. Tried t allocate 388.00 MiB (GPV 0; 39.43 GiB total capacity)",  # OCR'd
])
def test_cuda_out_of_memory_without_the_allocators_figures_is_still_a_device_oom(line):
    d = report(line + "\n")
    assert [(ev["kind"], ev["strength"]) for ev in d["oom_events"]] == [("cuda_runtime_error", "likely")]
    assert d["diagnoses"][0]["incident"] == "unknown-oom"


def test_the_allocators_own_message_is_read_once_by_its_family():
    d = report("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB. GPU 0 has a total capacity of "
               "79.15 GiB of which 6.75 MiB is free.\n")
    assert [ev["kind"] for ev in d["oom_events"]] == ["cuda_caching_allocator"]


def test_a_launchers_kill_glued_to_the_line_of_an_allocation_failure_leaves_that_failure_readable():
    # one physical line: the OOM (garbled past the allocator's form), then torchrun's warning
    d = report("JutofMemoryError: CUDA out of memory. Tried t allocate 388.00 MiB (GPV 0; 39.43 GiB total capacity)"
               "wandb: Waiting for W&B process to finish...(failed 1).WARNING:torch.distributed.elastic."
               "multiprocessing.api:Sending process 22093 closing signal SIGTERM\n")
    assert "cuda_runtime_error" in [ev["kind"] for ev in d["oom_events"]]
    assert d["diagnoses"][0]["incident"] == "unknown-oom"


_LOSS_SCALE = (
    '  File "/usr/local/lib/python3.8/dist-packages/deepspeed/runtime/fp16/loss_scaler.py", line 175, in update_scale\n'
    "    raise Exception(\n"
    "Exception: Current loss scale already at minimum - cannot decrease scale anymore. Exiting run.\n"
    "[2023-07-26 15:19:24,960] [INFO] [launch.py:315:sigkill_handler] Killing subprocess 45098\n"
    "[2023-07-26 15:19:27,802] [INFO] [launch.py:315:sigkill_handler] Killing subprocess 45099\n")


def test_a_bare_exception_is_a_ranks_own_failure_and_the_launchers_kills_follow_it():
    # a paste that starts inside the traceback: no header, only the frame and a bare Exception
    d = report(_LOSS_SCALE)
    assert not d["diagnoses"] and d["oom_events"] == []
    assert [f["kind"] for f in d["failures"]] == ["python_exception"]
    # DeepSpeed's fp16 loss scaler runs in the optimizer step
    assert d["phase"] == "optimizer_step"


def test_the_cuda_malloc_async_backends_message_and_its_table():
    d = report("RuntimeError: Allocation on device 0 would exceed allowed memory. (out of memory)\n"
               "Currently allocated     : 16.66 GiB\n"
               "Requested               : 31.27 MiB\n"
               "Device limit            : 22.13 GiB\n"
               "Free (according to CUDA): 4.62 MiB\n"
               "PyTorch limit (set by user-supplied memory fraction)\n"
               "                        : 11.00 GiB\n")
    ev = d["oom_events"][0]
    assert (ev["kind"], ev["message_format"], ev["device_index"]) == ("cuda_caching_allocator", "cuda-malloc-async", 0)
    sizes = {k: round(ev[k] / 2**20, 2) for k in ("tried_to_allocate_bytes", "free_bytes", "allocated_by_pytorch_bytes",
                                                   "total_capacity_bytes")}
    assert sizes == {"tried_to_allocate_bytes": 31.27, "free_bytes": 4.62, "allocated_by_pytorch_bytes": 16.66 * 1024,
                     "total_capacity_bytes": round(22.13 * 1024, 2)}
    assert ev["allowed_bytes"] == 11 * 2**30   # a limit below the device's
    assert d["diagnoses"]
    # a line that only talks about the allowed memory is no event
    assert report("INFO: allocation on device 0 stays within the allowed memory\n")["oom_events"] == []


def test_a_cuda_driver_result_2_is_out_of_memory():
    line = ("(WorkerDict pid=60511) [torch_memory_saver.cpp] CUresult error  result=2 file=csrc/torch_memory_saver.cpp "
            "func=cu_mem_create line=103\n")
    d = report(line * 2)
    assert [(ev["kind"], ev["count"]) for ev in d["oom_events"]] == [("cuda_runtime_error", 2)]
    assert d["diagnoses"][0]["incident"] == "unknown-oom"
    # another result code is another failure
    assert report(line.replace("result=2", "result=1"))["oom_events"] == []
    # the later wording
    d = report("[torch_memory_saver.cpp] CUresult error: 2 (out of memory) file=csrc/utils.h func=cu_mem_create line=187\n")
    assert [ev["kind"] for ev in d["oom_events"]] == ["cuda_runtime_error"]


@pytest.mark.parametrize("line", ["/nvshmem/src/host/mem/mem_heap.cpp:1509: non-zero status: 2 cuMemCreate failed \n",
                                  "cuMemAlloc failed with error 2\n", "cuMemMap returned 2\n"])
def test_the_driver_call_that_allocates_device_memory_failing_with_status_2(line):
    # (synthetic but for NVSHMEM's line) the driver call is named beside its status: 2 is
    # CUDA_ERROR_OUT_OF_MEMORY
    d = report(line)
    assert [ev["kind"] for ev in d["oom_events"]] == ["cuda_runtime_error"]
    assert d["diagnoses"][0]["incident"] == "unknown-oom"


@pytest.mark.parametrize("line", ["non-zero status: 1 cuMemCreate failed\n", "cuMemAllocHost failed with error 2\n",
                                  "cuMemCreate failed: 200 retries left\n", "cuMemAlloc failed on device 2\n",
                                  "cuMemMap returned 0 after 2 tries\n", "cuMemAlloc failed (size 2 GB)\n",
                                  "cuMemAlloc returned -2\n"])
def test_another_status_or_the_pinned_host_call_is_no_device_oom(line):
    assert report(line)["oom_events"] == []


@pytest.mark.parametrize("line,size", [
    ("  what():  std::bad_alloc: CNMEM error at: /opt/conda/envs/rapids/include/rmm/mr/device/cnmem_memory_resource.hpp168: "
     "CNMEM_STATUS_OUT_OF_MEMORY\n", None),
    # (synthetic, in the words of RMM's pool_memory_resource_impl.cpp)
    ("MemoryError: std::bad_alloc: out_of_memory: RMM failure at:/rmm/cpp/src/mr/detail/pool_memory_resource_impl.cpp:72: "
     "Maximum pool size exceeded (failed to allocate 1.000000 GiB): CUDA error\n", 2**30)])
def test_the_rapids_memory_managers_pool_running_out(line, size):
    d = report(line)
    [ev] = d["oom_events"]
    assert (ev["kind"], ev["message_format"]) == ("cuda_runtime_error", "rmm-memory-pool")
    assert ev["tried_to_allocate_bytes"] == size
    assert d["diagnoses"][0]["incident"] == "unknown-oom"
    # no PyTorch in the log: PyTorch's fixes are withheld
    assert all(not r["applicable"] for r in d["diagnoses"][0]["remediations"])
    assert "RAPIDS (RMM)" in d["diagnoses"][0]["remediations"][0]["why_not"]
    # the words alone, with no RMM beside them, are anyone's
    assert not report("ValueError: Maximum pool size exceeded\n")["oom_events"]


@pytest.mark.parametrize("code", ["result = torch.relu(input)", "x = F.conv2d(x, self.weight)", "h = F.layer_norm(h, shape)"])
def test_a_layers_functional_op_above_a_frameless_oom_is_the_forward_pass(code):
    d = report(f"{code}\nRuntimeError: CUDA out of memory. Tried to allocate 92.00 MiB (GPU 0; 5.80 GiB total capacity; "
               "4.45 GiB already allocated; 40.94 MiB free; 4.52 GiB reserved in total by PyTorch)\n")
    assert d["phase"] == "forward"


_WARNED = ("[W906 15:02:06.204334026 CUDACachingAllocator.cpp:3934] memory allocation failed with OOM on device 0 while "
           "trying to allocate 1000341504 bytes (free: {free}, total: 25243287552).\n")


def test_the_caching_allocators_warning_as_it_fails_is_an_oom_event():
    d = report(_WARNED.format(free=916848640) + _WARNED.format(free=421920768))
    evs = d["oom_events"]
    assert [(ev["message_format"], ev["device_index"], ev["tried_to_allocate_bytes"], ev["free_bytes"]) for ev in evs] == [
        ("caching-allocator-warning", 0, 1000341504, 916848640), ("caching-allocator-warning", 0, 1000341504, 421920768)]
    assert evs[0]["total_capacity_bytes"] == 25243287552 and d["diagnoses"]
    assert {ev["strength"] for ev in evs} == {"likely"}
    # the allocator retried and the run went on: survived, nothing to diagnose
    going_on = "".join(f"{{'loss': 1.{k}, 'grad_norm': 0.5, 'learning_rate': 1e-05, 'epoch': 0.{k}}}\n" for k in range(5))
    d = report(_WARNED.format(free=916848640) + going_on)
    assert [ev["survived"] for ev in d["oom_events"]] == [True] and not d["diagnoses"]
    # with the message raised for the same request, the warning is that event's evidence
    d = report(_WARNED.format(free=421920768) + "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 954.00 MiB. "
               "GPU 0 has a total capacity of 23.51 GiB of which 402.38 MiB is free.\n")
    assert [ev["message_format"] for ev in d["oom_events"]] == ["torch-2.1+"]
    assert [e["line"] for e in d["oom_events"][0]["evidence"]] == [2, 1]


def test_mlxs_allocator_refusing_a_buffer_is_a_device_oom():
    d = report("libc++abi: terminating due to uncaught exception of type std::runtime_error: [malloc_or_wait] Unable to "
               "allocate 12 bytes.\n")
    ev = d["oom_events"][0]
    assert (ev["kind"], ev["backend"], ev["tried_to_allocate_bytes"]) == ("mps", "MLX", 12)
    assert d["diagnoses"]
    d = report("libc++abi: terminating due to uncaught exception of type std::runtime_error: [malloc] Unable to allocate "
               "4096 bytes.\n")
    assert [(ev["kind"], ev["backend"]) for ev in d["oom_events"]] == [("mps", "MLX")]
    # numpy's own wording stays a host allocation
    d = report("numpy.core._exceptions._ArrayMemoryError: Unable to allocate 1.00 GiB for an array with shape "
               "(1024, 1024, 256) and data type float32\n")
    assert [ev["kind"] for ev in d["oom_events"]] == ["cpu_allocator"]


_RECOVERING = "2020-11-05 19:30:05 | WARNING | fairseq.trainer | attempting to recover from OOM in forward/backward pass\n"
_CAUGHT = ("2020-11-05 19:30:04 | WARNING | fairseq.trainer | OOM: Ran out of memory with exception: CUDA out of memory. "
           "Tried to allocate 28.00 MiB (GPU 1; 10.92 GiB total capacity; 10.13 GiB already allocated; 7.38 MiB free; "
           "10.18 GiB reserved in total by PyTorch)\n")


def test_a_trainers_notice_that_it_recovers_from_an_oom_is_that_oom():
    d = report(_RECOVERING + "Traceback (most recent call last):\n  File \"train.py\", line 8, in main\n    cli_main()\n"
               "Exception: \n")
    assert [(ev["kind"], ev["message_format"], ev["survived"]) for ev in d["oom_events"]] == [
        ("device_runtime", "recovery notice (message not in the log)", False)]
    assert d["diagnoses"][0]["incident"] == "unknown-oom"
    # the run went on: a recovered OOM, no failure
    going_on = "".join(f"2020-11-05 19:3{k}:00 | INFO | train_inner | epoch 001:  {k}0 / 356 loss=9.44, ups=0.07\n"
                       for k in range(1, 4))
    d = report(_RECOVERING + going_on)
    assert [ev["survived"] for ev in d["oom_events"]] == [True] and not d["diagnoses"]
    # with the message it caught just above, one event
    d = report(_CAUGHT + _RECOVERING)
    assert [ev["message_format"] for ev in d["oom_events"]] == ["torch-1.4-2.0"]
    # ... and with a runtime error and a memory summary per device between them (fairseq's _log_oom)
    summary = "".join(f"|  Allocated memory      |   {k} MiB |\n" for k in range(45))
    d = report("2020-11-05 19:30:04 | WARNING | fairseq.trainer | OOM: Ran out of memory with exception: CUDA error: "
               "out of memory\n" + summary + _RECOVERING)
    assert [ev["kind"] for ev in d["oom_events"]] == ["cuda_runtime_error"]
    # the same error and notice printed twice (two ranks, or a second try): copies, no extra event
    d = report((_CAUGHT + _RECOVERING) * 2)
    assert [ev["message_format"] for ev in d["oom_events"]] == ["torch-1.4-2.0"]
    # an error far above (another episode) does not explain a notice
    d = report(_CAUGHT + "x = 1\n" * 1200 + _RECOVERING)
    assert [ev["message_format"] for ev in d["oom_events"]] == ["torch-1.4-2.0", "recovery notice (message not in the log)"]


def test_mmcvs_task_bar_after_training_marks_evaluation():
    train = ("2023-02-12 11:51:16,618 - mmdet - INFO - Epoch [2][250/267]\tlr: 7.813e-06, eta: 12:37:28, time: 0.835, "
             "memory: 5608, loss: 1.7\n")
    d = report(train + "[>>>>>>>>>>>>>                    ] 6/15, 0.6 task/s, elapsed: 10s, ETA:    15s\n"
               "RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB (GPU 0; 15.78 GiB total capacity; "
               "12.10 GiB already allocated; 1.20 GiB free; 13.50 GiB reserved in total by PyTorch)\n")
    assert d["phase"] == "eval"
    # a finished bar ends the evaluation: the training that follows is not evaluation
    d = report(train + "[>>>>>>>>>>>>>>>>>>>>>>>>>>>>>>>>] 15/15, 3.0 task/s, elapsed: 5s, ETA:     0s\n"
               + train.replace("[2][250/267]", "[3][50/267]") * 3
               + "RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB (GPU 0; 15.78 GiB total capacity; "
               "12.10 GiB already allocated; 1.20 GiB free; 13.50 GiB reserved in total by PyTorch)\n")
    assert d["phase"] != "eval"


@pytest.mark.parametrize("held, own", [("78.89 GiB", 78.89), ("8.00 GiB", None)])
def test_a_listed_process_that_must_hold_pytorchs_memory_is_this_process(held, own):
    # in a container NVML names this process by a pid; one that holds more than could sit
    # beside PyTorch's 70.9 GiB on a 79.1 GiB device is this process, with 8 GiB outside PyTorch
    d = report("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 132.00 MiB. GPU 3 has a total capacity of "
               f"79.10 GiB of which 98.00 MiB is free. Process 387746 has {held} memory in use. Of the allocated memory "
               "70.12 GiB is allocated by PyTorch, and 765.81 MiB is reserved by PyTorch but unallocated.\n")
    got = d["oom_events"][0]["process_in_use_bytes"]
    assert (round(got / 2**30, 2) if got else None) == own


def test_a_bare_exception_before_a_runtime_oom_is_its_class():
    d = report("Exception: CUDA error: out of memory\n")
    assert [(ev["kind"], ev["exception"]) for ev in d["oom_events"]] == [("cuda_runtime_error", "Exception")]


def test_exception_ignored_in_does_not_end_a_traceback():
    from oomdoctor.read.normalise import normalise
    from oomdoctor.parsers import traceback
    from oomdoctor.parsers.base import ParseContext
    ctx = ParseContext(normalise(
        "Traceback (most recent call last):\n"
        '  File "train.py", line 10, in main\n    trainer.train()\n'
        "Exception ignored in: <function _MultiProcessingDataLoaderIter.__del__ at 0x7f>\n"
        '  File "/env/site-packages/transformers/trainer.py", line 1539, in train\n    return inner_training_loop(\n'
        "RuntimeError: CUDA error: an illegal memory access was encountered\n"))
    traceback.parse(ctx)
    assert traceback._traceback_end(ctx, ctx.frame_index[0]) == 6


def test_a_kill_right_after_zero3_set_up_its_parameter_offload_is_in_model_setup():
    d = report("Time to load utils op: 0.2017381191253662 seconds\n"
               "Parameter Offload: Total persistent parameters: 414720 in 81 params\n"
               "ERROR:torch.distributed.elastic.multiprocessing.api:failed (exitcode: -9) local_rank: 0 (pid: 53037) "
               "of binary: /usr/bin/python\n")
    assert d["phase"] == "model_load"
    # ... not once training has gone on since
    d = report("Parameter Offload: Total persistent parameters: 414720 in 81 params\n"
               "***** Running training *****\n"
               "ERROR:torch.distributed.elastic.multiprocessing.api:failed (exitcode: -9) local_rank: 0 (pid: 53037) "
               "of binary: /usr/bin/python\n")
    assert d["phase"] != "model_load"


@pytest.mark.parametrize("sizes_mib, siblings", [
    ([414, 414], 2),            # other ranks' CUDA contexts: one size
    ([414, 416, 420], 3),       # ... within a few MiB
    ([384, 516], 0),            # two small processes of different sizes are not copies of one context
    ([284, 3482], 0),
])
def test_sibling_contexts_are_equal_sized(sizes_mib, siblings):
    from oomdoctor.facts.derived import sibling_processes
    from oomdoctor.facts.models import OomEvent, ProcessUse
    ev = OomEvent(kind="cuda_caching_allocator", line=1, processes=[
        ProcessUse(pid=1000 + k, bytes=m * 2**20) for k, m in enumerate(sizes_mib)])
    assert sibling_processes(ev) == siblings


@pytest.mark.parametrize("pids, siblings", [
    ([18300, 18301], 2),             # a launcher's ranks, started together
    ([18300, 18340], 2),             # ... a few threads apart
    ([1692486, 3154968], 0),         # two programs started at different times (a desktop's)
    ([None, 3154968], 2),            # a PID unknown: nothing said
])
def test_sibling_contexts_were_started_together(pids, siblings):
    from oomdoctor.facts.derived import sibling_processes
    from oomdoctor.facts.models import OomEvent, ProcessUse
    ev = OomEvent(kind="cuda_caching_allocator", line=1, processes=[
        ProcessUse(pid=pid, bytes=(506 + 40 * k) * 2**20) for k, pid in enumerate(pids)])
    assert sibling_processes(ev) == siblings


def test_a_process_listed_twice_is_one_process():
    d = report("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 MiB. GPU 0 has a total capacity of "
               "95.62 GiB of which 773.41 MiB is free. Process 895189 has 95.61 GiB memory in use. Process 895189 has "
               "95.61 GiB memory in use. Of the allocated memory 76.80 GiB is allocated by PyTorch, and 189.91 MiB is "
               "reserved by PyTorch but unallocated.\n")
    ev = d["oom_events"][0]
    assert [p["pid"] for p in ev["processes"]] == [895189]
    # ... and, holding PyTorch's memory, it is this process: no other process holds the GPU
    assert d["diagnoses"][0]["incident"] != "stale-gpu-process"


@pytest.mark.parametrize("line,size", [
    # Intel Gaudi's PyTorch bridge, and its graph compiler's device-memory pool
    ("RuntimeError: [Rank:7] FATAL ERROR :: MODULE:PT_DEVMEM Allocation failed for size::469762048 (448)MB", 469762048),
    ("RuntimeError: FATAL ERROR :: MODULE:DEVMEM Allocation failed for size::1646821376", 1646821376),
])
def test_gaudi_device_memory_allocation_failure(line: str, size: int):
    d = report(line + "\n")
    assert [(e["kind"], e["backend"], e["tried_to_allocate_bytes"]) for e in d["oom_events"]] == [
        ("device_runtime", "HPU", size)]
    assert d["diagnoses"][0]["memory_failure"]


def test_gaudi_devmem_words_without_a_failure_are_not_one():
    assert not report("INFO: MODULE:PT_DEVMEM pool created, size::469762048\n")["oom_events"]


_XLA_ROWS = ("  14. Size: 688.00M\n"
             "     Shape: f32[8,2048,11008]{2,1,0:T(8,128)}\n"
             "     Unpadded size: 688.00M\n"
             "     XLA label: fusion.1783.remat4 = fusion(fusion.974.remat7.1.remat, all-gather.456.remat2), kind=kOutput\n"
             "     Allocation type: HLO temp\n"
             "     ==========================\n")


def test_rows_of_xlas_allocation_report_alone_are_a_likely_oom():
    # the report XLA prints only under an out-of-memory error, pasted without its header
    d = report(_XLA_ROWS)
    assert [(e["kind"], e["strength"], e["line"]) for e in d["oom_events"]] == [("xla", "likely", 4)]


@pytest.mark.parametrize("text", [
    "the report's rows say XLA label: fusion.12 and Allocation type: HLO temp\n",   # inside a sentence
    "     Allocation type: preallocated temp\n",                                      # another row
])
def test_words_of_xlas_report_that_are_not_its_rows_are_not_an_oom(text: str):
    assert not report(text)["oom_events"]


def test_xlas_allocation_report_under_its_error_is_one_event():
    d = report("jaxlib.xla_extension.XlaRuntimeError: RESOURCE_EXHAUSTED: Out of memory while trying to allocate "
               "721420288 bytes.\n" + _XLA_ROWS)
    assert [(e["kind"], e["line"]) for e in d["oom_events"]] == [("xla", 1)]


def test_launcher_kills_printed_before_the_childs_oom_follow_from_it():
    # the children's stderr reached the log after the DeepSpeed launcher's own lines
    kills = ("[2024-09-11 23:01:54,538] [INFO] [launch.py:316:sigkill_handler] Killing subprocess 2831\n"
             "[2024-09-11 23:01:54,700] [INFO] [launch.py:316:sigkill_handler] Killing subprocess 2832\n")
    oom = ("[rank1]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB. GPU 1 has a total "
           "capacity of 79.15 GiB of which 3.00 MiB is free.\n")
    assert [e["kind"] for e in report(kills + "\n" + oom)["oom_events"]] == ["cuda_caching_allocator"]
    # ... but kills with no failure after them are a silent death, weak evidence of a host kill
    assert [(e["kind"], e["strength"]) for e in report(kills)["oom_events"]] == [("host_oom_killer", "weak")]
    # the same for torchrun's agent stopping the survivors
    stops = "".join(f"W0726 10:59:50.786825 1405 torch/distributed/elastic/multiprocessing/api.py:858] "
                    f"Sending process {p} closing signal SIGTERM\n" for p in (147865, 147866))
    assert [e["kind"] for e in report(stops + oom)["oom_events"]] == ["cuda_caching_allocator"]


def test_worker_pids_only_from_one_hosts_launcher():
    # pids repeat across nodes: a worker pid named on another host says nothing of this one's
    one = ("W1126 04:47:37.491000 4390 torch/distributed/elastic/multiprocessing/api.py:1012] "
           "Sending process 4411 closing signal SIGTERM\n")
    assert report(one)["ranks"]["worker_pids"] == [4411]
    two = "node1: " + one + "node2: " + one.replace("4411", "5522")
    assert report(two)["ranks"]["worker_pids"] == []


_POD_NOTE = ("The actor is dead because its worker process has died. Worker exit type: SYSTEM_ERROR Worker exit "
             "detail: Worker exits unexpectedly. Worker exits with an exit code None. The worker may have exceeded "
             "K8s pod memory limits.\n")


def test_rays_note_on_pod_memory_limits_is_a_weak_host_kill():
    # Ray's words for a worker that died with no exit code on Kubernetes
    d = report(_POD_NOTE)
    assert [(e["kind"], e["strength"]) for e in d["oom_events"]] == [("host_oom_killer", "weak")]
    # ... after the job's own error, it says nothing more
    error = 'Traceback (most recent call last):\n  File "train.py", line 3, in <module>\nValueError: bad shape\n'
    assert not report(error + _POD_NOTE)["oom_events"]


_SUMMARY_ROWS = ("|            CUDA OOMs: {n}            |        cudaMalloc retries: 1         |\n"
                 "|===========================================================================|\n")


def test_a_memory_summary_that_counts_ooms_is_the_trace_of_one():
    d = report(_SUMMARY_ROWS.format(n=2))
    assert [(e["kind"], e["strength"], e["count"], e["line"]) for e in d["oom_events"]] == [
        ("cuda_caching_allocator", "likely", 2, 1)]
    assert not report(_SUMMARY_ROWS.format(n=0))["oom_events"]
    # the summaries count from the process's start: the last, largest count is the one
    assert [e["count"] for e in report(_SUMMARY_ROWS.format(n=1) + _SUMMARY_ROWS.format(n=3))["oom_events"]] == [3]
    # ... a different failure after the summary: its OOMs were caught, the run failed otherwise
    shape = ('Traceback (most recent call last):\n  File "train.py", line 10, in <module>\n    x = model(batch)\n'
             "ValueError: Expected input batch_size (16) to match target batch_size (8).\n")
    d = report(_SUMMARY_ROWS.format(n=1) + shape)
    assert [e["survived"] for e in d["oom_events"]] == [True]
    assert not any(x["memory_failure"] for x in d["diagnoses"])
    # where the message itself is in the log, the count adds nothing
    oom = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB. GPU 0 has a total capacity "
           "of 79.15 GiB of which 3.00 MiB is free.\n")
    assert len(report(oom + _SUMMARY_ROWS.format(n=1))["oom_events"]) == 1


def test_old_windows_cpu_allocator_message_with_its_format_string():
    # torch 1.0-1.1 printed "%dGB" and glued the figure after it, in a unit it does not say
    d = report("RuntimeError: [enforce fail at ..\\c10\\core\\CPUAllocator.cpp:62] data. DefaultCPUAllocator: not "
               "enough memory: you tried to allocate %dGB. Buy new RAM!208096001\n")
    assert [(e["kind"], e["host_bytes"]) for e in d["oom_events"]] == [("cpu_allocator", None)]
    assert d["diagnoses"][0]["incident"] == "host-oom"


def test_survivors_stopped_after_a_reported_death_are_not_a_silent_one():
    # another node's agent stops its workers after the job's root cause (a SIGABRT) was reported
    summary = ("Root Cause (first observed failure):\n[0]:\n  time      : 2024-07-26_10:59:45\n  host      : node1\n"
               "  rank      : 10 (local_rank: 2)\n  exitcode  : -6 (pid: 214033)\n  error_file: <N/A>\n"
               "  traceback : Signal 6 (SIGABRT) received by PID 214033\n")
    stops = "".join(f"W0726 10:59:50.786825 140538811684672 torch/distributed/elastic/multiprocessing/api.py:858] "
                    f"Sending process {p} closing signal SIGTERM\n" for p in (147865, 147866, 147867))
    assert not report(summary + stops)["oom_events"]
    # ... but the same stops with nothing reported before them are a rank that died silently
    assert [(e["kind"], e["strength"]) for e in report(stops)["oom_events"]] == [("host_oom_killer", "weak")]


def _cfe_entry(n, time, rank, code, pid, signal=None):
    tb = f"Signal {-code} ({signal}) received by PID {pid}" if signal else \
        "To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html"
    return (f"[{n}]:\n  time      : {time}\n  host      : localhost\n  rank      : {rank} (local_rank: {rank})\n"
            f"  exitcode  : {code} (pid: {pid})\n  error_file: <N/A>\n  traceback : {tb}\n")


def test_a_sigkill_timed_after_another_ranks_exception_is_torchruns_stop():
    # torchrun sends the survivors SIGTERM and, 30 s later, SIGKILL: a -9 listed after a rank
    # that raised (exit 1) is that stop, even where the Root Cause block is cut
    head = "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: \n" + "=" * 60 + \
        "\ntrain.py FAILED\n" + "-" * 60 + "\nFailures:\n"
    cascade = head + _cfe_entry(1, "2026-09-07_13:02:58", 3, 1, 14692) + \
        _cfe_entry(2, "2026-09-07_13:03:29", 0, -9, 14689, "SIGKILL") + "-" * 60 + "\n"
    assert report(cascade)["oom_events"] == []
    # ... while a -9 that came first, the exception after it, is a kill
    first = head + _cfe_entry(1, "2026-09-07_13:03:29", 3, 1, 14692) + \
        _cfe_entry(2, "2026-09-07_13:02:58", 0, -9, 14689, "SIGKILL") + "-" * 60 + "\n"
    assert [e["kind"] for e in report(first)["oom_events"]] == ["host_oom_killer"]


def test_xlas_autotuner_dropping_a_convolution_that_did_not_fit_is_no_failure():
    # the autotuner warns and goes on with another algorithm; the allocator's own error below is one
    warn = ("2021-05-15 17:06:18.153586: W external/org_tensorflow/tensorflow/compiler/xla/service/gpu/"
            "gpu_conv_algorithm_picker.cc:780] Failed to determine best cudnn convolution algorithm: Resource "
            "exhausted: Allocating 174487240704 bytes exceeds the memory limit of 4294967296 bytes.\n\n"
            "Convolution performance may be suboptimal.\n")
    assert report(warn)["oom_events"] == []
    bfc = ("2021-05-15 17:06:33.088411: W external/org_tensorflow/tensorflow/core/common_runtime/bfc_allocator.cc:457] "
           "Allocator (GPU_0_bfc) ran out of memory trying to allocate 977.79GiB (rounded to 1049890968832)requested "
           "by op \n")
    assert [e["message_format"] for e in report(warn + bfc)["oom_events"]] == ["bfc-allocator-ran-out"]


def test_tensorflow_0x_oom_without_a_shape_names_its_device_from_the_node_below():
    d = report("W tensorflow/core/common_runtime/executor.cc:1076] 0x18ef02bb0 Compute status: Resource exhausted: "
               "OOM when allocating tensor with shape\n"
               '\t [[Node: sub_2518 = Sub[T=DT_FLOAT, _device="/job:localhost/replica:0/task:0/gpu:1"](sub_2518/x)]]\n')
    ev = d["oom_events"][0]
    assert (ev["kind"], ev["backend"], ev["device_index"], ev["tried_to_allocate_bytes"]) == ("xla", "TF", 1, None)
    # the words alone, in a sentence, are not the message
    assert report("we see OOM when allocating tensor with shape [x] in the docs\n")["oom_events"] == []
    assert report("we hit OOM when allocating tensor with shape\n")["oom_events"] == []
    # a TensorFlow log is not a PyTorch one
    assert d["environment"]["framework"] != "plain-pytorch"


def test_a_cpu_allocator_message_cut_before_its_size_is_a_host_allocation():
    d = report("    state[\"exp_avg_sq\"] = torch.zeros_like(\n"
               "RuntimeError: [enforce fail at alloc_cpu.cpp:83] err == 0. DefaultCPUAllocator: can't allocate memory\n")
    ev = d["oom_events"][0]
    assert (ev["kind"], ev["tried_to_allocate_bytes"]) == ("cpu_allocator", None)
    assert d["diagnoses"][0]["incident"] == "host-oom"
    # the allocator named in a sentence that goes on is not its message
    assert report("note: DefaultCPUAllocator: can't allocate memory is printed when RAM runs out\n")["oom_events"] == []


def test_arrows_memory_error_is_a_host_allocation_with_its_size():
    d = report("Process SpawnPoolWorker-31:\npyarrow.lib.ArrowMemoryError: malloc of size 64 failed\n")
    ev = d["oom_events"][0]
    assert (ev["kind"], ev["tried_to_allocate_bytes"]) == ("cpu_allocator", 64)


def test_wddm_free_memory_is_not_taken_as_room_on_the_device():
    # NVML's "not available" per-process figure (Windows, WSL): the free figure is the driver's
    # budget view, not what an allocation can get, so the OOM is not explained away
    msg = ("torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 192.00 MiB. GPU 0 has a total capacty of "
           "47.99 GiB of which 8.18 GiB is free. Including non-PyTorch memory, this process has {own} memory in use. "
           "Of the allocated memory 36.80 GiB is allocated by PyTorch, and 1.41 GiB is reserved by PyTorch but "
           "unallocated.\n")
    assert report(msg.format(own="17179869184.00 GiB"))["oom_events"][0]["symptom"] is None
    assert report(msg.format(own="38.90 GiB"))["oom_events"][0]["symptom"] is not None


def test_a_cuda_error_typed_out_again_in_another_case_is_still_read():
    d = report("Runtime Error: Cuda error: out of memory at /workspace/csrc/cumem_allocator.cpp: 62\n")
    assert d["oom_events"][0]["kind"] == "cuda_runtime_error"
    assert report("if you hit a cuda error: out of memory, lower the batch size\n")["oom_events"] == []


_NCCL_WARN = ("node1:39:298 [0] bootstrap.cc:279 NCCL WARN [Rem Allocator] Allocation failed (segment 0, fd 130)\n"
              "node1:39:298 [0] include/alloc.h:48 NCCL WARN Cuda failure 'out of memory'\n"
              "node1:39:298 [0] NCCL INFO bootstrap.cc:231 -> 1\n")
_GOES_ON = ("Train Epoch: 1 [0/246000 (0%)]\tLoss: 0.036680415272713\n"
            "epoch is: 1 and train loss is 0.03668041527271271\n"
            "Train Epoch: 1 [2700/246000 (18%)]\tLoss: 0.000002425569619\n")


def test_nccls_own_warning_with_no_exception_after_it_and_the_run_going_on_is_survived():
    d = report(_NCCL_WARN + _GOES_ON)
    assert d["oom_events"][0]["survived"] is True
    assert [x for x in d["diagnoses"] if not x.get("warning")] == []
    # ... but an exception after it is what the warning led to
    died = report(_NCCL_WARN + _GOES_ON + "torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1970, "
                  "unhandled cuda error (run with NCCL_DEBUG=INFO for details), NCCL version 2.21.5\n")
    assert died["oom_events"][0]["survived"] is False
    # ... and one progress line is not enough
    assert report(_NCCL_WARN + _GOES_ON.splitlines()[0] + "\n")["oom_events"][0]["survived"] is False


def test_a_tpu_reservation_failure_takes_its_capacity_from_the_table_under_it():
    d = report("RuntimeError: Resource exhausted: From /job:tpu_worker/replica:0/task:0:\n"
               "Attempting to reserve 3.95G at the bottom of memory. That was not possible. There are 1.92G free, 0B "
               "reserved, and 1.92G reservable.; \n"
               "HBM capacity 8.00G:\n"
               "       Top-of-Memory reserved:  529.00M (     554,696,704 bytes)\n")
    ev = d["oom_events"][0]
    assert (ev["total_capacity_bytes"], ev["free_bytes"]) == (8 * 2**30, int(1.92 * 2**30))


@pytest.mark.parametrize("before, phase", [("Quantizing Mistral\n", "model_load"),
                                           ("we are not Quantizing anything here\n", None)])
def test_a_trainer_quantizing_the_weights_it_loaded_is_loading_the_model(before, phase):
    d = report(
        before + "Error running job: CUDA error: out of memory\n"
        "CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below might be incorrect.\n")
    assert d["phase"] == phase


@pytest.mark.parametrize("line, world", [
    ("Training with a single process on 1 GPUs.", 1),
    ("Training in distributed mode with multiple processes, 1 GPU per process. Process 0, total 8.", 8),
    ("Training with a single process on a laptop is slow", None),
])
def test_timms_training_mode_line_gives_the_world_size(line, world):
    d = report(line + "\nKilled\n")
    assert d["environment"]["world_size"] == world


def test_a_deepspeed_config_passed_as_base64_is_read():
    import base64
    import json
    cfg = {"train_batch_size": 2, "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"}}}
    b64 = base64.b64encode(json.dumps(cfg).encode()).decode()
    d = report(f"[2023-05-17 11:25:13,146] [ERROR] [launch.py:324:sigkill_handler] ['/usr/bin/python', '-u', "
               f"'train.py', '--local_rank=1', '--deepspeed_config', '{b64}'] exits with return code = -7\n")
    assert d["environment"]["zero_stage"] == 2
    # ... not text that only looks like base64
    d = report("'--deepspeed_config', 'eyJub3QganNvbg' exits with return code = -7\n")
    assert d["environment"]["zero_stage"] is None


@pytest.mark.parametrize("line", [
    "  07/25/2022 19:34:26 [0:7051]: cgroup/OOM: Killed because of memory limit",
    "  failed cgroups enforced memory limit because:",
    "TERM_MEMLIMIT: job killed after reaching LSF memory usage limit.",
    "=>> PBS: job killed: mem 134217728kb exceeded limit 131072000kb",
    "=>> PBS: job killed: vmem 17223929856 exceeded limit 17179869184",
    "=>> PBS: job killed: mem job total 138412032 kb exceeded limit 134217728 kb",
])
def test_batch_schedulers_memory_limit_kills_are_host_ooms(line):
    d = report(">Max vmem         = 434.289G\n  Max rss          = 315.860G\n" + line + "\n")
    ev = d["oom_events"][0]
    assert (ev["kind"], ev["strength"]) == ("host_oom_killer", "certain")
    assert d["diagnoses"][0]["incident"] == "host-oom"


@pytest.mark.parametrize("line", [
    "=>> PBS: job killed: walltime 3610 exceeded limit 3600",
    "docs: jobs that failed cgroups enforced memory limit because: see below",
])
def test_a_scheduler_line_that_is_not_a_memory_kill_is_not_one(line):
    assert report(line + "\n")["oom_events"] == []


def test_a_native_assertion_is_a_crash_that_explains_the_launchers_kills():
    log = ("python: /opt/conda/lib/python3.10/site-packages/deepspeed/ops/csrc/aio/common/deepspeed_aio_common.cpp:125: "
           "int _do_io_complete(long long int, long long int): Assertion `n_completes >= min_completes' failed.\n"
           "[2023-12-31 02:55:09,375] [INFO] [launch.py:315:sigkill_handler] Killing subprocess 302\n")
    d = report(log)
    assert [f["kind"] for f in d["failures"]][:1] == ["native_assertion"]
    assert [x["incident"] for x in d["diagnoses"] if not x.get("warning")] == []
    # ... while a kernel's assertion on the device stays a device-side assert
    kernel = ("../aten/src/ATen/native/cuda/Indexing.cu:1289: indexSelectLargeIndex: block: [56,0,0], thread: [64,0,0] "
              "Assertion `srcIndex < srcSelectDimSize` failed.\n")
    assert [f["kind"] for f in report(kernel)["failures"]] == ["device_side_assert"]
    # ... and an assertion named in prose is none
    assert report("the Assertion `x' failed. line is printed by assert()\n")["failures"] == []


def test_the_interpreters_own_abort_is_a_crash_that_explains_the_launchers_kills():
    log = ("Train:  27%|███▍         | 1250/4708 [31:08:58<88:27:54, 92.10s/it]\n"
           "Fatal Python error: none_dealloc: deallocating None: bug likely caused by a refcount error in a C extension\n"
           "Python runtime state: initialized\n\n"
           "W0802 23:48:41.941000 103473 torch/distributed/elastic/multiprocessing/api.py:900] Sending process 103491 "
           "closing signal SIGTERM\n")
    d = report(log)
    assert "python_fatal_error" in [f["kind"] for f in d["failures"]]
    assert [x["incident"] for x in d["diagnoses"] if not x.get("warning")] == []
    # ... but not when what it reports is memory
    for text in ("Fatal Python error: Cannot recover from MemoryErrors while normalizing exceptions.",
                 "Fatal Python error: _PyErr_NormalizeException: Cannot recover from MemoryErrors while normalizing "
                 "exceptions."):
        assert "python_fatal_error" not in [f["kind"] for f in report(text + "\n")["failures"]]


@pytest.mark.parametrize("source, library", [
    ("/pytorch/torch/lib/THC/generic/THCStorage.cu:58", False),       # torch 0.x: every tensor's storage
    ("/pytorch/aten/src/THC/THCCachingAllocator.cpp:510", False),
    ("C:\\w\\1\\s\\windows\\pytorch\\aten\\src\\thc\\generic/THCStorage.cu:58", False),   # a Windows build
    ("/workspace/csrc/cumem_allocator.cpp:62", True),                   # vLLM's own allocator
])
def test_a_cuda_error_in_pytorchs_own_sources_is_not_another_librarys_allocator(source, library):
    d = report(f"RuntimeError: cuda runtime error (2) : out of memory at {source}\n")
    assert (d["oom_events"][0]["message_format"] == "library-allocator") == library


def test_the_allocators_exception_with_only_its_request_is_an_oom_of_that_size():
    d = report("torch.OutOfMemoryError: Tried to allocate 12.60 GiB. GPU had 12.44 GiB free of 79.19\n")
    ev = d["oom_events"][0]
    assert (ev["kind"], ev["tried_to_allocate_bytes"]) == ("cuda_caching_allocator", int(12.60 * 2**30))
    assert report("OutOfMemoryError: Tried to allocate memory for the cache, retrying\n")["oom_events"] == []
    assert report("torch.OutOfMemoryError: Tried to allocate 20 more blocks\n")["oom_events"] == []
    # ... and a shortened copy of a message the log holds whole is that message
    whole = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 12.60 GiB. GPU 0 has a total capacity of "
             "79.19 GiB of which 12.44 GiB is free.\n")
    assert len(report(whole + "torch.OutOfMemoryError: Tried to allocate 12.60 GiB. (see above)\n")["oom_events"]) == 1


def test_a_feature_cache_being_built_is_data_preparation():
    d = report("Converting examples to features: 100%|██████| 307315/307315 [06:21<00:00, 805.69it/s]\n"
               "01/11/2022 07:37:52 - INFO - __main__ -   Saving features into cached file cached_train_384\n\nKilled\n")
    assert d["phase"] == "data_loading"


def test_mlx_refusing_a_buffer_larger_than_metal_allows_is_an_apple_gpu_oom():
    d = report("RuntimeError: [metal::malloc] Attempting to allocate 17179869184 bytes which is greater than the maximum "
               "allowed buffer size of 14302248960 bytes.\n")
    ev = d["oom_events"][0]
    assert (ev["kind"], ev["backend"], ev["tried_to_allocate_bytes"]) == ("mps", "MLX", 17179869184)


@pytest.mark.parametrize("code, oom", [("2", True), ("700", False)])
def test_caffe2s_cuda_enforce_with_the_out_of_memory_code(code, oom):
    d = report(f"RuntimeError: [enforce fail at event_gpu.cc:17] error == cudaSuccess. {code} vs 0. Error at: "
               "/pytorch/caffe2/core/event_gpu.cc:17: an error\n")
    assert bool(d["oom_events"]) == oom


@pytest.mark.parametrize("line", [
    "docs: MODULE:DEVMEM Allocation failed for size::1646821376 is rare",
    "tip: if you see `[metal::malloc] Attempting to allocate 17179869184 bytes which is greater than the maximum "
    "allowed buffer size of 14302248960 bytes` lower the batch",
    "if ray.memory_monitor.RayOutOfMemoryError: More than 95% of the memory on node node1 is used then",
])
def test_a_runtimes_out_of_memory_words_quoted_in_a_sentence_are_not_its_failure(line):
    assert report(line + "\n")["oom_events"] == []


@pytest.mark.parametrize("line, world", [
    ("ValueError: The global train batch size (7 x 1) must be evenly divisible by the number of generations per "
     "prompt (8). Given the current train batch size, the valid values for the number of generations are: [7].", 7),
    ("ValueError: The global eval batch size (4 x 2) must be evenly divisible by the number of generations per "
     "prompt (3). Given the current eval batch size, the valid values for the number of generations are: [2, 4, 8].", 4),
    ("ValueError: The global train batch size (2 x 4 x 8 = 64) must be evenly divisible by the number of generations "
     "per prompt (7).", 2),
    ("ValueError: The effective train batch size (7 x 1 x 4) must be evenly divisible by the number of "
     "generations per prompt (8).", 7),
    ("The global train batch size (256) is set in the config", None),
])
def test_trls_batch_size_check_gives_the_world_size(line, world):
    d = report(line + "\n")
    assert d["environment"]["world_size"] == world


@pytest.mark.parametrize("closing, failure", [
    # a library's exception class printed with its module, whatever its name ends with
    ("pyarrow.lib.ArrowInvalid: offset overflow while concatenating arrays",
     "pyarrow.lib.ArrowInvalid: offset overflow while concatenating arrays"),
    ("torch._dynamo.exc.Unsupported: call_function args: UserDefinedObjectVariable",
     "torch._dynamo.exc.Unsupported: call_function args: UserDefinedObjectVariable"),
    # a log line after the frames is not the traceback's exception
    ("Epoch: 3 loss 0.1932", None),
    ("transformers.trainer: saving the model", None),
])
def test_a_tracebacks_closing_line_names_its_exception(closing, failure):
    d = report(_tb(("/env/site-packages/datasets/table.py", "concat_tables", "pa_table = pa_table.combine_chunks()"),
                   error=closing))
    got = [f["message"] for f in d["failures"] if f["kind"] == "python_exception"]
    assert got == ([failure] if failure else [])


@pytest.mark.parametrize("line, kind", [
    # inference engines finding no memory left for their KV cache
    ("ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization` when "
     "initializing the engine.", "device_runtime"),
    ("ValueError: The model's max seq len (32768) is larger than the maximum number of tokens that can be stored in "
     "KV cache (12345). Try increasing `gpu_memory_utilization` or decreasing `max_model_len` when initializing the "
     "engine.", "device_runtime"),
    ("ValueError: Free memory on device cuda:0 (12.18/23.56 GiB) on startup is less than desired GPU memory "
     "utilization (0.92, 21.67 GiB). Decrease GPU memory utilization or reduce GPU memory used by other processes.",
     "device_runtime"),
    ("RuntimeError: Not enough memory. Please try to increase --mem-fraction-static.", "device_runtime"),
    # TensorFlow's stream executor failing to create cuBLAS's handle (its device memory)
    ("E tensorflow/stream_executor/cuda/cuda_blas.cc:372] failed to create cublas handle: CUBLAS_STATUS_NOT_INITIALIZED",
     "cublas_alloc"),
    # vLLM's own report of the cache's budget after the weights and the profiled activations, below zero
    ("(EngineCore_0 pid=5839) INFO 08-20 18:04:22 [gpu_worker.py:276] Available KV cache memory: -2.14 GiB",
     "device_runtime"),
    ("ValueError: To serve at least one request with the models's max seq len (131072), (16.00 GiB KV cache is needed, "
     "which is larger than the available KV cache memory (9.84 GiB). Based on the available memory, the estimated "
     "maximum model length is 80608.", "device_runtime"),
    # transformers refusing a quantized model's device map: the GPUs cannot hold its weights
    ("ValueError: Some modules are dispatched on the CPU or the disk. Make sure you have enough GPU RAM to fit the "
     "quantized model. If you want to dispatch the model on the CPU or the disk while keeping these modules in "
     "32-bit, you need to set `llm_int8_enable_fp32_cpu_offload=True`", "device_runtime"),
    # accelerate's batch-size finder out of sizes
    ("RuntimeError: No executable batch size found, reached zero.", "device_runtime"),
    # PyTorch's MPS allocator refusing one buffer
    ("RuntimeError: Invalid buffer size: 18.00 GB", "mps"),
    # the words in other senses
    ('WARNING: if you see "No available memory for the cache blocks", raise gpu_memory_utilization', None),
    ("tip: a RuntimeError such as No executable batch size found, reached zero means the model does not fit", None),
    ("Invalid buffer size: -1", None),
    ("gpu_memory_utilization=0.9, mem-fraction-static=0.8 passed to the engine", None),
    # vLLM's budget line with room left; cuBLAS's handle refused for another reason than memory
    ("INFO 08-20 18:04:22 [gpu_worker.py:276] Available KV cache memory: 2.14 GiB", None),
    ("E tensorflow/stream_executor/cuda/cuda_blas.cc:372] failed to create cublas handle: CUBLAS_STATUS_ARCH_MISMATCH",
     None),
    ("note: if Some modules are dispatched on the CPU or the disk. Make sure you have enough GPU RAM, quantize", None),
])
def test_memory_budget_failures_of_engines_and_batch_finders(line, kind):
    d = report(line + "\n")
    assert [e["kind"] for e in d["oom_events"]] == ([kind] if kind else [])


def test_an_engines_start_up_guard_reads_the_device_it_found():
    d = report("ValueError: Free memory on device (61.05/119.7 GiB) on startup is less than desired GPU memory "
               "utilization (0.52, 62.24 GiB).\n")
    (ev,) = d["oom_events"]
    assert ev["free_bytes"] == 65551938355 and ev["total_capacity_bytes"] == 128526896333   # 61.05 and 119.7 GiB


@pytest.mark.parametrize("text, kind, device", [
    # the Ascend runtime's own report of a failed device allocation
    ("RuntimeError: ACL stream synchronize failed.\n"
     "EL0004: 2025-01-31-08:23:58.845.175 Failed to allocate memory.\n"
     "        Possible Cause: Available memory is insufficient.\n"
     "        rtMalloc execute failed, reason=[driver error:out of memory][FUNC:FuncErrorReason][FILE:error_message_manage.cc][LINE:53]\n"
     "        Task execute failed, device_id=7, stream_id=6, task_id=9035.[FUNC:GetError][FILE:stream.cc][LINE:1082]\n",
     "npu", 7),
    # ... in later CANN releases' wording, the error's type before its code
    ("[PID: 210907] 2026-04-09-21:56:40.384.694 Memory_Allocation_Failure(EL0004): Failed to allocate memory requested "
     "by GE module.\n        Possible Cause: Available memory is insufficient.\n"
     "        Call rtMalloc fail, purpose: page caching, type = 2, size:3221291008, device_id:0[FUNC:Alloc]"
     "[FILE:device_allocator.cc][LINE:72]\n", "npu", 0),
    # Gaudi's graph workspace
    ("RuntimeError: SYNHELPER workspace Allocation of size ::14493510400 failed!\n", "device_runtime", None),
    # the class named without its message: an error report's field, Ray relaying a task's
    # exception, the asynchronous allocator's first words
    ("- **Exception Type:** torch.OutOfMemoryError\n- **Exception Message:** Allocation on device \n",
     "cuda_caching_allocator", None),
    ("ray.exceptions.RayTaskError(OutOfMemoryError): ray::DTensorPolicyWorker.get_logprobs() (pid=1, ip=10.0.0.1)\n",
     "cuda_caching_allocator", None),
    ("torch.OutOfMemoryError: Allocation on device \n", "cuda_caching_allocator", None),
    # the words in other senses
    ("EL0004 is the error code table's first entry\n", None, None),
    ("SYNHELPER workspace Allocation of size ::0 succeeded\n", None, None),
    ("Exception Type: RuntimeError\nException Message: CUDA error: device-side assert triggered\n", None, None),
    ("ray.exceptions.RayTaskError(ValueError): ray::Worker.step() (pid=1, ip=10.0.0.1)\n", None, None),
])
def test_runtimes_own_allocation_failures_and_the_class_named_alone(text, kind, device):
    d = report(text)
    assert [e["kind"] for e in d["oom_events"]] == ([kind] if kind else [])
    if kind:
        assert d["oom_events"][0]["device_index"] == device


def test_a_relayed_exception_whose_message_follows_is_one_event():
    d = report("ray.exceptions.RayTaskError(OutOfMemoryError): ray::Policy.get_logprobs() (pid=1, ip=10.0.0.1)\n"
               "  File \"/app/policy.py\", line 10, in get_logprobs\n    logits = self.model(x)\n"
               "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity "
               "of 79.15 GiB of which 1.02 GiB is free.\n")
    assert [e["tried_to_allocate_bytes"] for e in d["oom_events"]] == [2 * 2**30]


@pytest.mark.parametrize("line, killed", [
    ("`Killed`", True),
    ("`Loading checkpoint shards:   0%|          | 0/2 [00:00<?, ?it/s] `\n`Killed`", True),
    # backticks inside a line are the message's own
    ("`use_cache=True` is incompatible with gradient checkpointing. Setting `use_cache=False`", False),
    ("```", False),
])
def test_a_line_wrapped_in_inline_code_backticks_reads_as_its_text(line, killed):
    d = report(line + "\n")
    assert [e["kind"] for e in d["oom_events"]] == (["host_oom_killer"] if killed else [])


@pytest.mark.parametrize("bar, phase", [
    # a dataset being mapped when the process was killed
    ("padding:  65% 2207000/3382137 [03:08<01:16, 15381.54 examples/s]", "data_loading"),
    ("tokenize (num_proc=32):  28%|██▊       | 187687/665298 [1:57:46<04:59:51, 26.55 examples/s]", "data_loading"),
    ("padding:  50%|#    | 50/100 [00:01<00:01,  1.50s/examples]", "data_loading"),
    # a finished map is over; a training bar counts iterations
    ("merge and mask: 100% 3382137/3382137 [02:41<00:00, 20891.13 examples/s]", None),
    (" 45%|████▌     | 450/1000 [03:08<03:50,  2.39it/s]", None),
])
def test_an_unfinished_dataset_map_bar_is_data_loading(bar, phase):
    d = report(bar + "\nKilled\n")
    assert d["phase"] == phase


def test_the_first_exception_of_a_chained_traceback_is_a_failure_too():
    d = report(_tb(("/env/site-packages/datasets/table.py", "concat_tables", "pa_table = pa_table.combine_chunks()"),
                   error="pyarrow.lib.ArrowInvalid: offset overflow while concatenating arrays")
               + "\nDuring handling of the above exception, another exception occurred:\n\n"
               + _tb(("train.py", "main", "ds = load()"), error="ValueError: could not load the dataset"))
    got = [f["message"] for f in d["failures"] if f["kind"] == "python_exception"]
    assert got == ["pyarrow.lib.ArrowInvalid: offset overflow while concatenating arrays",
                   "ValueError: could not load the dataset"]


def test_an_ascend_report_reads_its_device_only_from_its_own_lines():
    d = report("EL0004: Failed to allocate memory.\n"
               "        Possible Cause: Available memory is insufficient.\n"
               "[INFO] rank 3 ready, device_id=3\n")
    assert [e["device_index"] for e in d["oom_events"]] == [None]


def test_ray_relaying_its_own_memory_monitors_error_is_not_a_device_oom():
    d = report("ray.exceptions.RayTaskError(OutOfMemoryError): ray::W.f() (pid=1, ip=10.0.0.1)\n"
               "ray.exceptions.OutOfMemoryError: Task was killed due to the node running low on memory.\n")
    assert [(e["kind"], e["message_format"]) for e in d["oom_events"]] == [("host_oom_killer", "ray-memory-monitor")]


@pytest.mark.parametrize("agent_line", [
    "W1130 12:13:49.388000 124326 torch/distributed/elastic/agent/server/api.py:723] Received 15 death signal, "
    "shutting down workers",
    "WARNING:torch.distributed.elastic.agent.server.api:Received Signals.SIGTERM death signal, shutting down workers",
])
def test_a_launcher_that_was_itself_signalled_stopped_its_workers_for_that(agent_line):
    d = report("[default0]:12:13:46    INFO Starting training step 0\n" + agent_line + "\n"
               "W1130 12:13:49.389000 124326 torch/distributed/elastic/multiprocessing/api.py:900] Sending process "
               "124533 closing signal SIGTERM\n")
    assert d["oom_events"] == []


def test_survivors_stopped_with_no_signal_to_the_launcher_are_a_weak_host_kill():
    d = report("[default0]:12:13:46    INFO Starting training step 0\n"
               "W1130 12:13:49.389000 124326 torch/distributed/elastic/multiprocessing/api.py:900] Sending process "
               "124533 closing signal SIGTERM\n")
    assert [(e["kind"], e["strength"]) for e in d["oom_events"]] == [("host_oom_killer", "weak")]


def test_an_ascend_report_is_one_event_with_its_device_and_size():
    d = report("RuntimeError: NPU out of memory.\n"
               "EL0004: Failed to allocate memory.\n"
               "        Possible Cause: Available memory is insufficient.\n"
               "        Task execute failed, device_id=7, stream_id=6.[FUNC:GetError][FILE:stream.cc][LINE:1082]\n"
               "        rtMalloc execute failed, reason=[driver error:out of memory][FUNC:FuncErrorReason]\n"
               "        Call rtMalloc fail, purpose: page caching, type = 2, size:4110811136, device_id:7[FUNC:Alloc]\n")
    cann = [e for e in d["oom_events"] if e["message_format"] == "cann-el0004"]
    assert [(e["device_index"], e["tried_to_allocate_bytes"], e["count"]) for e in cann] == [(7, 4110811136, 1)]


@pytest.mark.parametrize("message", [
    "- **Exception Message:** MPS backend out of memory (MPS allocated: 17.75 GB, other allocations: 1.2 GB, max "
    "allowed: 18.13 GB). Tried to allocate 256.00 MB on private pool.",
    "- **Exception Message:** Allocation on device 0 would exceed allowed memory. (out of memory)",
])
def test_an_error_reports_type_beside_its_message_is_not_a_second_event(message):
    d = report("- **Exception Type:** torch.OutOfMemoryError\n" + message + "\n")
    assert len(d["oom_events"]) == 1


def test_a_tracebacks_closing_line_is_found_between_another_ranks_frames():
    d = report('[rank0]:   File "/env/site-packages/datasets/table.py", line 10, in concat_tables\n'
               '[rank1]:   File "train.py", line 5, in main\n'
               "[rank0]:     pa_table = pa_table.combine_chunks()\n"
               "[rank0]: pyarrow.lib.ArrowInvalid: offset overflow while concatenating arrays\n"
               "[rank1]:     ds = load()\n"
               "[rank1]: ValueError: could not load the dataset\n")
    got = [f["message"] for f in d["failures"] if f["kind"] == "python_exception"]
    assert "pyarrow.lib.ArrowInvalid: offset overflow while concatenating arrays" in got


@pytest.mark.parametrize("line, cuda", [
    ("CUDA runtime version: 12.1.105", "12.1.105"),
    # nvidia-smi -q's row: the newest CUDA the driver supports, not the toolkit in use
    ("CUDA Version                              : 12.4", None),
])
def test_the_cuda_version_is_the_toolkits(line, cuda):
    d = report(line + "\nKilled\n")
    assert d["environment"]["cuda_version"] == cuda


def test_an_error_reports_own_prose_about_memory_is_not_the_message():
    d = report("- **Exception Type:** torch.OutOfMemoryError\n- **Exception Message:** Allocation on device \n"
               "This error means you ran out of memory on your GPU.\n")
    assert [e["kind"] for e in d["oom_events"]] == ["cuda_caching_allocator"]


@pytest.mark.parametrize("code, phase", [
    ("    return self._apply(lambda t: t.bfloat16() if t.is_floating_point() else t)", "model_load"),
    ("    return self._apply(convert)", "model_load"),
    ("    out = self._apply_rotary(q, cos, sin)", None),
])
def test_a_modules_conversion_of_its_parameters_is_placing_the_model(code, phase):
    d = report(code + "\ntorch.OutOfMemoryError: CUDA out of memory. Tried to allocate 72.00 MiB.\n")
    assert d["phase"] == phase


@pytest.mark.parametrize("line, device", [
    ("tensorflow.python.framework.errors_impl.InternalError: Failed copying input tensor from "
     "/job:localhost/replica:0/task:0/device:CPU:0 to /job:localhost/replica:0/task:0/device:GPU:1 in order to run "
     "_EagerConst: Dst tensor is not initialized.", 1),
    ("InternalError: Dst tensor is not initialized.", None),
])
def test_tensorflow_failing_to_copy_a_tensor_to_the_gpu_is_an_oom(line, device):
    d = report(line + "\n")
    assert [(e["kind"], e["backend"], e["device_index"]) for e in d["oom_events"]] == [("xla", "TF", device)]


def test_dst_tensor_quoted_in_a_sentence_is_no_failure():
    d = report("tip: the error 'Dst tensor is not initialized' usually means the GPU is full\n")
    assert d["oom_events"] == []


@pytest.mark.parametrize("start, phase", [
    ("2024-05-07 15:51:09,140 - root - INFO - Starting training step on epoch 3", "epoch_end"),
    ("Beginning epoch 2/10", "epoch_end"),
    # a counter from 0: its second epoch
    ("Starting epoch 0\nStarting epoch 1", "epoch_end"),
    # the first epoch beginning is the start of training; a resumed run is not a boundary
    ("Starting training step on epoch 1", None),
    ("Restarting from epoch 3", None),
    ("Resumed checkpoint; starting from epoch 5", None),
    # settings that name an epoch, and other stages that start at one
    ("python train.py --start-epoch 3 --lr 0.1", None),
    ("LR decay starts at epoch 30", None),
    ("Warmup begins at epoch 2", None),
    ("Starting evaluation at epoch 3", "eval"),
    ("Starting evaluation on epoch 3", "eval"),
    ("Starting checkpoint save for epoch 3", None),
    ("Early stopping starts after epoch 10", None),
    # a separator around the line is no flag
    ("---------- Beginning epoch 2/10 ----------", "epoch_end"),
])
def test_a_line_announcing_an_epoch_begins_is_a_boundary(start, phase):
    timeout = ("[E ProcessGroupNCCL.cpp:457] [Rank 3] Watchdog caught collective operation timeout: WorkNCCL("
               "SeqNum=1132079, OpType=ALLREDUCE, NumelIn=304640, NumelOut=304640, Timeout(ms)=1800000) ran for "
               "1800035 milliseconds before timing out.\n")
    assert report(start + "\n" + timeout)["phase"] == phase


def test_tensorflows_pinned_host_allocation_failure_is_read_with_its_size():
    d = report("2020-11-24 11:32:25.434730: E tensorflow/stream_executor/cuda/cuda_driver.cc:868] failed to alloc "
               "4294967296 bytes on host: CUDA_ERROR_OUT_OF_MEMORY: out of memory\n")
    (ev,) = d["oom_events"]
    assert ev["tried_to_allocate_bytes"] == 4294967296 and "host" in ev["detail"]
    # ... the device's own ("from device") stays the driver's device failure
    (ev,) = report("E tensorflow/stream_executor/cuda/cuda_driver.cc:932] failed to allocate 2.2K (2304 bytes) from "
                   "device: CUDA_ERROR_OUT_OF_MEMORY\n")["oom_events"]
    assert ev["tried_to_allocate_bytes"] == 2304 and "host" not in ev["detail"]


@pytest.mark.parametrize("line, oom", [
    # Caffe's glog CHECK on the runtime's code (2: cudaErrorMemoryAllocation)
    ("F1025 17:11:54.660645  1436 syncedmem.cpp:58] Check failed: error == cudaSuccess (2 vs. 0)  out of memory", True),
    ("F1025 17:11:54.660645  1436 syncedmem.cpp:58] Check failed: error == cudaSuccess (2 vs. 0)", True),
    # ... another code is another error
    ("F1025 17:11:54.660645  1436 math_functions.cu:79] Check failed: error == cudaSuccess (8 vs. 0)  invalid device "
     "function", False),
])
def test_a_glog_check_on_the_cuda_runtimes_code(line, oom):
    assert bool(report(line + "\n")["oom_events"]) == oom


@pytest.mark.parametrize("line, n", [
    # PhysX's device allocator (Isaac Gym)
    ("PxgCudaDeviceMemoryAllocator fail to allocate memory 339738624 bytes!! Result = 2", 339738624),
    ("CudaHostAllocator statistics: 3 blocks", None),
    # ... an allocator that is not the device's
    ("PinnedHostAllocator fail to allocate memory 4096 bytes", None),
    ("PxgCudaHostMemoryAllocator fail to allocate memory 4096 bytes!! Result = 2", None),
    # ... a result that is not out of memory (700: an illegal address, an earlier crash's)
    ("PxgCudaDeviceMemoryAllocator fail to allocate memory 675282944 bytes!! Result = 700", None),
])
def test_a_cuda_librarys_own_allocator_refusing_a_request(line, n):
    events = report(line + "\n")["oom_events"]
    assert [e["tried_to_allocate_bytes"] for e in events] == ([n] if n else [])


@pytest.mark.parametrize("line, events", [
    # ComfyUI reporting a node's exception by the allocator's first words (glued to a trainer's bar)
    ("Epoch 1/134 - steps:   0%|     | 0/1600 [00:00<?, ?it/s]2025-07-08 10:39:40 ERROR    !!! Exception during "
     "processing !!! Allocation on device                   execution.py:430", 1),
    # ... once, with the traceback it prints after it (whose last line is the same exception)
    ("2025-07-08 10:39:40 ERROR    !!! Exception during processing !!! Allocation on device\n"
     "Traceback (most recent call last):\n  File \"execution.py\", line 361, in execute\n"
     "    output_data = get_output_data(obj)\ntorch.OutOfMemoryError: Allocation on device", 1),
    ("!!! Exception during processing !!! Allocation on device 0 would exceed allowed memory. (out of memory)\n"
     "Traceback (most recent call last):\n  File \"execution.py\", line 361, in execute\n"
     "    output_data = get_output_data(obj)\n"
     "torch.OutOfMemoryError: Allocation on device 0 would exceed allowed memory. (out of memory)", 1),
    # ... in the releases that print no space before the second "!!!", with a cut traceback under it
    ("!!! Exception during processing!!! Allocation on device \n"
     "Traceback (most recent call last):\n  File \"execution.py\", line 152, in recursive_execute\n"
     "    output_data, output_ui = get_output_data(obj, input_data_all)", 1),
    ("!!! Exception during processing!!! Allocation on device\n"
     "Traceback (most recent call last):\n  File \"execution.py\", line 361, in execute\n"
     "    output_data = get_output_data(obj)\ntorch.OutOfMemoryError: Allocation on device", 1),
    # ... another exception reported the same way is none
    ("2025-07-08 10:39:40 ERROR    !!! Exception during processing !!! Expected all tensors to be on the same device",
     0),
    ("!!! Exception during processing!!! Expected all tensors to be on the same device", 0),
    # ... ComfyUI's error dialog copied from the UI: the header, a blank line, the message alone
    ("Error occurred when executing DepthAnything_V2:\n\nAllocation on device \n\n"
     "File \"C:\\ComfyUI\\execution.py\", line 317, in execute", 1),
    # ... or printed by a node that caught it, after its own words and a colon
    ("Error in image_to_3d: Allocation on device \nTraceback (most recent call last):\n"
     '  File "/x/IF_Trellis.py", line 331, in image_to_3d', 1),
    # ... once, under the class its report names on the line before
    ("- **Exception Type:** torch.OutOfMemoryError\n- **Exception Message:** Allocation on device ", 1),
    # ... a sentence that holds the words is none
    ("The Allocation on device memory is reported below", 0),
    ("note: Allocation on device 0 would exceed allowed memory is the async allocator's message", 0),
])
def test_comfyuis_report_of_the_allocators_exception(line, events):
    assert len(report(line + "\n")["oom_events"]) == events


def test_the_allocators_first_words_after_its_class_name_the_exception():
    (ev,) = report("torch.OutOfMemoryError: Allocation on device \n")["oom_events"]
    assert ev["exception"] == "torch.OutOfMemoryError"


def test_evidence_for_a_message_glued_to_a_progress_bar_quotes_the_message():
    line = ("Epoch 1/134 - steps:   0%|" + " " * 60 + "| 0/1600 [00:00<?, ?it/s]2025-07-08 10:39:40 ERROR    !!! "
            "Exception during processing !!! Allocation on device                   execution.py:430\n")
    (ev,) = report(line)["oom_events"]
    assert ev["evidence"][0]["text"].startswith("…!!! Exception during processing")
    # ... while a line of one piece is quoted whole, its prefixes included
    (ev,) = report("[rank0]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB\n")["oom_events"]
    assert ev["evidence"][0]["text"].startswith("[rank0]: torch.OutOfMemoryError")


@pytest.mark.parametrize("text, kind, fmt, size", [
    # PaddlePaddle's allocator, before 2.0 (no figure for what was allocated) and after
    ("ResourceExhaustedError: \n\nOut of memory error on GPU 0. Cannot allocate 3.125000GB memory on GPU 0, "
     "available memory is only 117.750000MB.\n", "cuda_runtime_error", "paddle-allocator", int(3.125 * 2**30)),
    ("Out of memory error on GPU 0. Cannot allocate 128.000000MB memory on GPU 0, 7.995605GB memory has been "
     "allocated and available memory is only 0.000000B.\n", "cuda_runtime_error", "paddle-allocator", 128 * 2**20),
    # a CUDA call named with its result in words, from a framework's C++ check
    ("F0912 17:23:26.346724   783 all_reduce_op_handle.cc:75] cudaGetLastError  out of memory errno:2\n",
     "cuda_runtime_error", "cuda-call", None),
    # MXNet's check of the runtime's status (the status is no call)
    ("  what():  [17:54:40] /mshadow/./stream_gpu-inl.h:198: Check failed: e == cudaSuccess CUDA: out of memory\n",
     "cuda_runtime_error", None, None),
    ("Name: Check failed: err == cudaSuccess (2 vs. 0) : mxnet_generic_kernel ErrStr:out of memory\n",
     "cuda_runtime_error", None, None),
    # GraphVite's glog CHECK with the runtime's words, in its own allocator's source
    ("Check failed: error == cudaSuccess CUDA error out of memory at /work/include/base/memory.h:131\n",
     "cuda_runtime_error", "library-allocator", None),
    # Tenstorrent's allocator
    ("2025-11-26 19:48:22.915 | critical |          Always | TT_FATAL: Out of Memory: Not enough space to allocate "
     "131072000 B DRAM buffer across 12 banks, where each bank needs to store 10924032 B, but bank size is only "
     "1073741792 B (assert.hpp:103)\n", "device_runtime", "tt-metal-allocator", 131072000),
    # ... a page-locked host allocation's call is pinned memory
    ("[ERROR] MD(14433,7f,python):2021-12-12-14:13:43.932.181 [arena.cc:250] Init] cudaHostAlloc failed, ret[2], "
     "out of memory\n", "cuda_runtime_error", "cuda-driver-host-alloc", None),
    # CuPy's memory pool
    ("cupy.cuda.memory.OutOfMemoryError: out of memory to allocate 205520896 bytes (total 16068929536 bytes)\n",
     "cuda_runtime_error", "cupy-memory-pool", 205520896),
    # Theano's GPU arrays raise MemoryError for the device's memory
    ("MemoryError: Error allocating 147865600 bytes of device memory (out of memory).\n", "device_runtime", None,
     147865600),
    # CuPy 8 and later
    ("cupy.cuda.memory.OutOfMemoryError: Out of memory allocating 8,589,934,592 bytes (allocated so far: "
     "77,309,411,328 bytes).\n", "cuda_runtime_error", "cupy-memory-pool", 8589934592),
    # ... re-raised by a trainer that names no exception class (Chainer's "Exception in main training loop")
    ("Exception in main training loop: Out of memory allocating 255,688,704 bytes (allocated so far: "
     "3,670,475,776 bytes).\n", "cuda_runtime_error", "cupy-memory-pool", 255688704),
    # a library's check that memory could not be allocated, naming the device call (its error's words cut)
    ("ERROR    Uncaught exception: Could not allocate memory: gpu_memory.h:112 cudaMalloc(&rawptr, n_bytes) failed "
     "with error out of memor\n", "cuda_runtime_error", "cuda-call", None),
    # a Vulkan renderer on the GPU
    ("[Error] [carb.graphics-vulkan.plugin] VkResult: ERROR_OUT_OF_DEVICE_MEMORY\n", "device_runtime",
     "library-allocator", None),
])
def test_other_frameworks_device_allocation_failures(text, kind, fmt, size):
    (ev,) = report(text)["oom_events"]
    assert (ev["kind"], ev["message_format"], ev["tried_to_allocate_bytes"]) == (kind, fmt, size)


@pytest.mark.parametrize("text", [
    "cupy.cuda.memory.OutOfMemoryError: Out of memory allocating 205,520,896 bytes (allocated so far: 1,024 bytes).\n",
    "MemoryError: std::bad_alloc: out_of_memory: RMM failure at:/rmm/cpp/src/mr/detail/pool_memory_resource_impl.cpp:72: "
    "Maximum pool size exceeded (failed to allocate 1.000000 GiB): CUDA error\n",
    "[2024-01-01 10:00:00.123] [engine] [error] failed to allocate 8589934592 bytes of GPU memory\n",
])
def test_a_device_pool_or_a_message_naming_gpu_memory_is_a_cuda_runtime_failure_not_pinned_host_memory(text):
    # (the corpus's vocabulary has no kind for "another library's CUDA pool": a failed cudaMalloc
    # outside PyTorch's allocator is the CUDA runtime's; its words name the device, not pinned pages)
    d = report(text)
    assert [(e["kind"], e["backend"]) for e in d["oom_events"]] == [("cuda_runtime_error", "CUDA")]
    assert "pinned-memory" not in _incidents(d)
    # ... while the runtime's own bare error still lets pinned host memory be considered
    assert "pinned-memory" in _incidents(report("RuntimeError: CUDA error: out of memory\n"))


def test_cupys_pool_total_is_what_the_pool_holds():
    (ev,) = report("out of memory to allocate 205520896 bytes (total 16068929536 bytes)\n")["oom_events"]
    assert ev["reserved_total_bytes"] == 16068929536
    (ev,) = report("cupy.cuda.memory.OutOfMemoryError: Out of memory allocating 512 bytes (allocated so far: 1,024 "
                   "bytes).\n")["oom_events"]
    assert (ev["tried_to_allocate_bytes"], ev["reserved_total_bytes"]) == (512, 1024)
    # ... and the report says whose total it is (a CUDA runtime failure, but not PyTorch's pool)
    from oomdoctor.report.text import render_text
    out = render_text(oomdoctor.diagnose("cupy.cuda.memory.OutOfMemoryError: Out of memory allocating 512 bytes "
                                         "(allocated so far: 1,024 bytes).\n"))
    assert "by the library's memory pool" in out and "by PyTorch" not in out


@pytest.mark.parametrize("line", [
    "WARNING: could not allocate memory for the cache, cudaMalloc retried later\n",   # no failure word
    "Cannot allocate memory\n",                                                      # no device call
    "ZE_RESULT_ERROR_OUT_OF_DEVICE_MEMORY\n",                                        # Level Zero: Intel's, not Vulkan's
])
def test_what_is_no_device_allocation_call_failing(line):
    assert not any(e["message_format"] in ("cuda-call", "library-allocator") for e in report(line)["oom_events"])


def test_other_processes_on_the_device_leave_the_free_figure_no_proof():
    # free memory at the time of the message is read after the failed request; others on the
    # device allocate and free in between
    msg = ("torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 32.00 MiB. GPU 0 has a total capacity "
           "of 23.69 GiB of which 2.53 GiB is free. {procs}Including non-PyTorch memory, this process has 2.41 GiB "
           "memory in use. Of the allocated memory 2.16 GiB is allocated by PyTorch, and 1.92 MiB is reserved by "
           "PyTorch but unallocated.\n")
    alone = report(msg.format(procs=""))
    assert alone["oom_events"][0]["symptom"]     # 2.53 GiB free for 32 MiB: not memory pressure
    shared = report(msg.format(procs="Process 11 has 9.43 GiB memory in use. Process 12 has 9.30 GiB memory in use. "))
    assert shared["oom_events"][0]["symptom"] is None
    assert shared["diagnoses"][0]["memory_failure"]


def test_a_notice_that_names_a_cuda_call_is_no_failure():
    assert report("INFO: cudaMalloc will not run out of memory with this setting\n")["oom_events"] == []
    assert report("INFO: cudaMallocAsync will not run out of memory; no error\n")["oom_events"] == []
    # ... while an exception that names one is
    (ev,) = report("RuntimeError: cudaMalloc out of memory\n")["oom_events"]
    assert ev["message_format"] == "cuda-call"


def test_an_error_type_is_not_a_cuda_call():
    # torch_memory_saver's "cudaError error: 2 (out of memory)" echoes the driver's failure above it
    d = report("[torch_memory_saver.cpp] cuMemCreate CUDA_ERROR_OUT_OF_MEMORY (may not be an issue)\n"
               "[torch_memory_saver.cpp] cudaError error: 2 (out of memory)  file=csrc/core.cpp func=resume\n")
    assert [e["message_format"] for e in d["oom_events"]] == ["cuda-driver-api"]


def test_thrusts_bad_alloc_is_the_devices():
    (ev,) = report("SystemError: (Fatal) Operator argsort raises an thrust::system::detail::bad_alloc exception.\n")["oom_events"]
    assert ev["kind"] == "cuda_runtime_error" and ev["backend"] == "CUDA"


_PADDLE_REPORT = ("MemoryError:\n\n--------------------------------------\nC++ Traceback (most recent call last):\n"
                  "--------------------------------------\nNot support stack backtrace yet.\n\n----------------------\n"
                  "Error Message Summary:\n----------------------\nResourceExhaustedError:\n\n"
                  "Out of memory error on GPU 0. Cannot allocate 128.000000MB memory on GPU 0, 7.995605GB memory has "
                  "been allocated and available memory is only 0.000000B.\n")


def test_a_bare_memoryerror_introducing_a_devices_error_report_is_that_failure():
    d = report(_PADDLE_REPORT)
    assert [e["kind"] for e in d["oom_events"]] == ["cuda_runtime_error"]
    assert d["oom_events"][0]["evidence"][0]["line"] == 1
    # ... a MemoryError whose words say the device's memory failed is the device's
    assert [e["kind"] for e in report("MemoryError: failed to allocate GPU memory\n")["oom_events"]] == ["cuda_runtime_error"]
    assert [e["kind"] for e in report("MemoryError: not enough memory to copy the GPU tensor to the host\n")["oom_events"]] \
        == ["cpu_allocator"]
    # ... a message split from its request by a blank line is one message
    d = report("torch.cuda.OutOfMemoryError: CUDA out of memory.\n\nTried to allocate 20.00 MiB (GPU 0; 1.96 GiB total "
               "capacity; 1.24 GiB already allocated; 2.88 MiB free; 1.25 GiB reserved in total by PyTorch)\n")
    assert len(d["oom_events"]) == 1
    # ... a bare MemoryError alone is the host's
    assert [e["kind"] for e in report("MemoryError:\n")["oom_events"]] == ["cpu_allocator"]
    # ... and one that a new traceback separates from the device's message
    d = report("MemoryError:\nTraceback (most recent call last):\n  File \"x.py\", line 1, in f\n    g()\n"
               "RuntimeError: CUDA error: out of memory\n")
    assert sorted(e["kind"] for e in d["oom_events"]) == ["cpu_allocator", "cuda_runtime_error"]
    # ... and one whose message says nothing of a device too, whatever follows
    d = report("MemoryError: std::bad_alloc\n" + _PADDLE_REPORT.split("\n", 1)[1])
    assert sorted(e["kind"] for e in d["oom_events"]) == ["cpu_allocator", "cuda_runtime_error"]


def test_paddles_dataloader_process_killed_and_its_shared_memory_map():
    d = report("SystemError: (Fatal) DataLoader process (pid 1104) exited is killed by signal: Killed. "
               "(at /paddle/paddle/fluid/imperative/data_loader.cc:181)\n")
    assert [e["kind"] for e in d["oom_events"]] == ["dataloader_killed"]
    d = report("ERROR:root:DataLoader reader thread failed((Unavailable) Memory map failed when rebuild shared memory.\n")
    assert [f["kind"] for f in d["failures"]] == ["shm_exhausted"]
    d = report("RuntimeError: failed to allocate a shared memory block of 4096 bytes\n")
    assert "shm_exhausted" in [f["kind"] for f in d["failures"]]
    # ... nor a fallback that does without it
    d = report("ERROR: mmap failed for /dev/shm segment, not using shared memory\n")
    assert "shm_exhausted" not in [f["kind"] for f in d["failures"]]
    # ... a memory-mapped file that fails is no shared memory
    d = report("RuntimeError: mmap failed for /data/train.bin: Invalid argument\n")
    assert [f["kind"] for f in d["failures"]] == ["python_exception"]


def test_the_bfc_allocators_name_says_which_device_the_status_line_does_not():
    d = report("2025-07-18 11:07:06.132422: W external/xla/xla/tsl/framework/bfc_allocator.cc:501] Allocator (GPU_1_bfc) "
               "ran out of memory trying to allocate 510.68MiB (rounded to 535486464)requested by op \n"
               "E0718 11:07:06.132657  193878 pjrt_stream_executor_client.cc:3077] Execution of replica 0 failed: "
               "RESOURCE_EXHAUSTED: Out of memory while trying to allocate 535486464 bytes.\n")
    (ev,) = d["oom_events"]
    assert (ev["kind"], ev["device_index"], ev["tried_to_allocate_bytes"]) == ("xla", 1, 535486464)


def test_a_memoryerror_carrying_the_cuda_runtimes_error_is_the_devices():
    d = report("MemoryError: std::bad_alloc: cudaErrorMemoryAllocation: out of memory\n")
    assert [e["kind"] for e in d["oom_events"]] == ["cuda_runtime_error"]


def test_a_programs_uncaught_bad_alloc_printed_alone_is_a_host_allocation_failure():
    d = report("Sample 50000000 random context vectors\nNow do CCA (left size: 50000000, right size: 50000000).\n"
               "std::bad_alloc\n")
    assert [(e["kind"], e["strength"]) for e in d["oom_events"]] == [("cpu_allocator", "likely")]
    # ... the name inside a sentence reports nothing
    assert report("INFO the loader caught std::bad_alloc and retried with a smaller buffer\n")["oom_events"] == []


def test_an_exception_message_continued_on_the_lines_below_it():
    text = ("RuntimeError: Critical error in pipeline:\nError when executing Mixed operator ImageDecoder encountered:\n"
            "CUDA allocation failed\nCurrent pipeline object is no longer valid.\n")
    assert [(e["kind"], e["backend"]) for e in report(text)["oom_events"]] == [("cuda_runtime_error", "CUDA")]
    # ... not across a blank line, nor from a line that does not end its sentence with a colon
    assert report(text.replace("encountered:\n", "encountered:\n\n"))["oom_events"] == []
    assert report("RuntimeError: Critical error in pipeline.\nCUDA allocation failed\n")["oom_events"] == []


def test_nvjpegs_allocator_failure_is_a_cuda_librarys_allocation():
    (ev,) = report("RuntimeError: Critical error in pipeline: Error in thread 0: NVJPEG error \"5\" : "
                   "NVJPEG_STATUS_ALLOCATOR_FAILURE val/0001.JPEG\n")["oom_events"]
    assert ev["kind"] == "cublas_alloc"


@pytest.mark.parametrize("line", [
    'Exception in thread "main" java.lang.OutOfMemoryError: Java heap space',
    '`Exception in thread "Thread-40" java.lang.OutOfMemoryError: Cannot allocate new DoublePointer(10000000): '
    'totalBytes = 2G, physicalBytes = 4G',
])
def test_the_java_virtual_machine_out_of_memory_is_the_hosts(line):
    (ev,) = report(line + "\n")["oom_events"]
    assert (ev["kind"], ev["message_format"]) == ("cpu_allocator", "jvm")


@pytest.mark.parametrize("line", [
    'Exception in thread "main" java.lang.OutOfMemoryError: unable to create new native thread',
    'Exception in thread "main" java.lang.OutOfMemoryError: Requested array size exceeds VM limit',
])
def test_the_jvms_limits_that_are_no_shortage_of_memory(line):
    assert report(line + "\n")["oom_events"] == []


@pytest.mark.parametrize("text, size, capacity", [
    ("Tried to allocate 20.00 MiB (GPU 0; 1.96 GiB total capacity; 1.24 GiB already allocated; 2.88 MiB free; "
     "1.25 GiB reserved in total by PyTorch)\n", 20 * 2**20, round(1.96 * 2**30)),
    ("`Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.15 GiB of which 1.20 GiB is free.`\n",
     2 * 2**30, round(79.15 * 2**30)),
])
def test_the_allocators_message_pasted_from_its_request_on(text, size, capacity):
    (ev,) = report(text)["oom_events"]
    assert (ev["kind"], ev["tried_to_allocate_bytes"], ev["total_capacity_bytes"]) == \
        ("cuda_caching_allocator", size, capacity)
    assert ev["message_format"].startswith("headless")


def test_a_message_wrapped_before_its_request_is_one_whole_message():
    d = report("RuntimeError: CUDA out of memory.\nTried to allocate 20.00 MiB (GPU 0; 1.96 GiB total capacity; "
               "1.24 GiB already allocated; 2.88 MiB free; 1.25 GiB reserved in total by PyTorch)\n")
    assert [(e["message_format"], e["count"]) for e in d["oom_events"]] == [("torch-1.4-2.0", 1)]
    # ... and the words alone, in prose, are no message
    assert report("Tried to allocate 20.00 MiB on GPU 0 but the run went on\n")["oom_events"] == []


def test_an_npus_message_pasted_from_its_request_on_is_the_npus():
    (ev,) = report("Tried to allocate 2.00 GiB (NPU 0; 32.00 GiB total capacity; 29.80 GiB already allocated; "
                   "1.59 GiB free; 50.34 MiB cached)\n")["oom_events"]
    assert (ev["kind"], ev["backend"]) == ("npu", "NPU")


@pytest.mark.parametrize("lines", [
    ["`blk.35.attn_norm.weight, n_dims = 1, torch.bfloat16 --> float32", "Killed`"],
    ["`blk.35.attn_norm.weight, n_dims = 1, torch.bfloat16 --> float32", "Killed", "`"],
])
def test_a_code_span_over_several_pasted_lines(lines):
    # the user's inline-code backticks open the first line and close the last
    d = report("\n".join(lines) + "\n")
    assert [e["kind"] for e in d["oom_events"]] == ["host_oom_killer"]


def test_a_lone_backtick_inside_a_line_is_kept():
    from oomdoctor.read.normalise import normalise
    ln = normalise("  set `num_stages lower\n")[0]
    assert ln.text == "  set `num_stages lower"


_JAX_ALLOC = ("2023-09-15 15:37:48.404245: E external/xla/xla/pjrt/pjrt_stream_executor_client.cc:2593] Execution of "
              "replica 0 failed: RESOURCE_EXHAUSTED: Out of memory while trying to allocate 92198188384 bytes.\n")


@pytest.mark.parametrize("operator, phase", [
    ('jit(train_step)/jit(main)/jvp(Model)/layers_3/attention/dot_general', "forward"),
    ('pjit(train_step)/jit(main)/transpose(jvp(Model))/h/3/mlp/dot_general', "backward"),
    # no gradient: no pass of a training step; a program compiled from predict() evaluates
    ('jit(predict)/jit(main)/Model/layers_3/attention/dot_general', "eval"),
    ('jit(apply)/jit(main)/Model/layers_3/attention/dot_general', None),
])
def test_xlas_operator_names_say_which_pass_of_the_step(operator, phase):
    log = _JAX_ALLOC + f'  1. Size: 85.87G\n     Operator: op_name="{operator}"\n'
    assert report(log)["phase"] == phase


def test_xlas_rematerialization_falling_short_is_the_activations():
    d = report("2023-09-15 15:37:29.263873: W external/xla/xla/service/hlo_rematerialization.cc:2202] Can't reduce "
               "memory use below 23.81GiB (25567444992 bytes) by rematerialization; only reduced to 86.14GiB "
               "(92489619062 bytes), down from 95.71GiB (102770769072 bytes) originally\n" + _JAX_ALLOC)
    assert d["diagnoses"][0]["incident"] == "activation-memory"
    assert report(_JAX_ALLOC)["diagnoses"][0]["incident"] == "unknown-oom"


def test_the_bfc_allocators_retry_notice_is_never_the_first_failure():
    d = report("W1126 15:15:36.267966 511 bfc_allocator.cc:371] Allocator (GPU_0_bfc) ran out of memory trying to "
               "allocate 64.02GiB from the lower end with freed_by_count=0. The caller indicates that this is not a "
               "failure, but this may mean that there could be performance gains if more memory were available.\n"
               + _JAX_ALLOC)
    assert d["ranks"]["first_failure_line"] == 2


@pytest.mark.parametrize("said, phase", [
    ("resuming from /ckpt/checkpoint-1000.pt", "checkpoint_load"),
    ("Resuming training from /ckpt/checkpoint-1000.pt", "checkpoint_load"),
    ("loading the pretrained weights", "model_load"),
    # a run that says it does not resume reads its weights
    ("No checkpoint found, not resuming from a previous run", "model_load"),
    ("no resuming from checkpoint: starting fresh", "model_load"),
])
def test_tensors_read_right_after_the_job_says_it_resumes_are_the_checkpoint(said, phase):
    log = (f"{said}\nTraceback (most recent call last):\n"
           '  File "/work/train.py", line 11, in <module>\n    state = torch.load(path, map_location="cuda")\n'
           '  File "/usr/lib/python3.12/site-packages/torch/serialization.py", line 1570, in load\n    return _load(\n'
           "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1024.00 MiB. GPU 0 has a total capacity of "
           "79.18 GiB of which 76.66 GiB is free. Including non-PyTorch memory, this process has 2.51 GiB memory in use. "
           "2.38 GiB allowed; Of the allocated memory 2.00 GiB is allocated by PyTorch, and 0 bytes is reserved by "
           "PyTorch but unallocated.\n")
    assert report(log)["phase"] == phase


def test_a_users_memory_print_with_a_space_before_its_figure():
    log = "".join(f"step {i} | loss 0.0390 | memory_allocated {1.84 + 1.25 * i:.2f} GiB\n" for i in range(6))
    d = report(log)
    assert [s["allocated_bytes"] for s in d["memory_samples"]][:2] == [int(1.84 * 2**30), int(3.09 * 2**30)]
    # ... and a bare number after the key is no figure (a count, a step)
    assert report("memory_allocated 3 times\n")["memory_samples"] == []


_TF_OOM_LINE = ("tensorflow.python.framework.errors_impl.ResourceExhaustedError: OOM when allocating tensor with "
                "shape[5760,4,4,2048] and type float on /job:localhost/replica:0/task:0/device:GPU:0 by allocator GPU_0_bfc\n")


@pytest.mark.parametrize("node, phase", [
    ("fc1_voc12_c3/convolution/SpaceToBatchND", "forward"),
    ("gradients/Conv2D_23_grad/Conv2DBackpropInput", "backward"),
    ("model/transformer/word_embedding/lookup_table/Adam/Initializer/zeros", "optimizer_step"),
    ("inter_B/dense2/weight/Initializer/random_uniform/RandomUniform", "model_load"),
    # an optimizer slot named after its variable (BERT's AdamWeightDecayOptimizer), not a variable's assignment
    ("bert/encoder/layer_2/attention/self/key/kernel/adam_m/Assign", "optimizer_step"),
    ("bert/encoder/layer_2/attention/self/key/kernel/Assign", "model_load"),
    ("IteratorGetNext/_1", "data_loading"),
    ("XRTExecute", None),      # the runtime's node, not the model's graph
    ("sub_2518", None),        # no scope: nothing says where in the step
])
def test_tensorflows_failing_node_says_which_part_of_the_step(node, phase):
    assert report(_TF_OOM_LINE + f"\t [[{{{{node {node}}}}}]]\n")["phase"] == phase


@pytest.mark.parametrize("text, size", [
    # TensorFlow 2's constant kernels: "tensor of shape"
    ("W tensorflow/core/framework/op_kernel.cc:1628] OP_REQUIRES failed at constant_op.cc:77 : Resource exhausted: "
     "OOM when allocating tensor of shape [] and type float\n", None),
    # the status raised as TensorFlow's exception class, with no shape
    ("ResourceExhaustedError: failed to allocate memory\n", None),
    # TensorFlow 1.x's BFC allocator, which named no allocator
    ("W tensorflow/core/common_runtime/bfc_allocator.cc:275] Ran out of memory trying to allocate 720.00MiB.  See "
     "logs for memory state.\n", 720 * 2**20),
])
def test_tensorflows_other_wordings_of_its_allocators_failure(text, size):
    (ev,) = report(text)["oom_events"]
    assert ev["backend"] == "TF" and ev["tried_to_allocate_bytes"] == size


_BFC_STATS = ("Stats: \nLimit:                 15922230068\nInUse:                 15585278208\n"
              "MaxInUse:              15922230016\nNumAllocs:                     376\n\n")
_TF_SHAPE_OOM = ("2018-06-18 12:27:48.890342: W tensorflow/core/framework/op_kernel.cc:1158] Resource exhausted: OOM when "
                 "allocating tensor with shape[512,5555540]\n")


def test_the_bfc_allocators_limit_above_its_error_is_the_capacity():
    (ev,) = report(_BFC_STATS + _TF_SHAPE_OOM)["oom_events"]
    assert ev["total_capacity_bytes"] == 15922230068
    # a limit far above the error is another report's (or a setting's)
    far = _BFC_STATS + "".join(f"step {i}\n" for i in range(40)) + _TF_SHAPE_OOM
    assert report(far)["oom_events"][0]["total_capacity_bytes"] is None
    # ... and one below it is no statistics of that failure
    assert report(_TF_SHAPE_OOM + _BFC_STATS)["oom_events"][0]["total_capacity_bytes"] is None


def test_a_resource_exhausted_error_about_something_else_is_no_oom():
    assert report("ResourceExhaustedError: Quota exceeded for the project\n")["oom_events"] == []


@pytest.mark.parametrize("line", [
    "Jun 30, 2021, 11:55:32 AM | INFO | KernelRestarter: restarting kernel (1/5), keep random ports\n",
    "The kernel appears to have died. It will restart automatically.\n",
    "The Kernel crashed while executing code in the current cell or a previous cell.\n",
    "[1]    2843557 killed\n",          # zsh's job report with its command cut off
    "MVM coalescing... [1]    51630 killed     ./vgg16.test\n",   # ... glued to a status line
    # the notebook server's log of its restarter bringing a dead kernel back
    "May 4, 2020, 5:02:35 PM | WARNING | WARNING:root:kernel 4222e7b2-aca5-4c53-972e-ea8892e41d74 restarted\n",
    "[W 10:02:11.371 NotebookApp] kernel 0d3bd4a8-19a2-4c1f-9f0e-2b8f6c3d1a77 restarted\n",
])
def test_a_notebook_kernel_or_a_shell_job_that_died_is_a_weak_host_kill(line):
    (ev,) = report(line)["oom_events"]
    assert (ev["kind"], ev["strength"]) == ("host_oom_killer", "weak")


def test_detectron2s_retry_on_the_cpu_is_a_caught_device_oom():
    for text in ("Attempting to copy inputs of <function paste_masks_in_image at 0x7f2b> to CPU due to CUDA OOM\n",
                 # the function's repr over several lines: the notice's last line
                 "      importance_sample_ratio: 0.75\n)> to CPU due to CUDA OOM\n"):
        (ev,) = report(text)["oom_events"]
        assert ev["message_format"] == "recovery notice (message not in the log)"
    # the words in another order (documentation of the retry, not its notice)
    assert report("retry_if_cuda_oom: on CUDA OOM, copies the inputs to CPU and runs again\n")["oom_events"] == []


def test_a_trainers_notice_that_it_skipped_a_batch_for_memory():
    (ev,) = report("| WARNING: ran out of memory, skipping batch\n")["oom_events"]
    assert ev["message_format"] == "recovery notice (message not in the log)"
    assert report("WARNING: skipping batch 12: empty\n")["oom_events"] == []


def test_a_container_lists_its_own_process_as_a_process():
    # in a container PyTorch names this process "Process N has ..."; it is no other process
    d = report("torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 32.00 MiB. GPU 0 has a total "
               "capacity of 23.69 GiB of which 2.53 GiB is free. Process 4242 has 2.41 GiB memory in use. Of the "
               "allocated memory 2.16 GiB is allocated by PyTorch, and 1.92 MiB is reserved by PyTorch but unallocated.\n")
    assert d["oom_events"][0]["symptom"]


@pytest.mark.parametrize("text, kind", [
    ("joblib.externals.loky.process_executor.TerminatedWorkerError: A worker process managed by the executor was "
     "unexpectedly terminated. The exit codes of the workers are {SIGKILL(-9)}\n", "host_oom_killer"),
    ("2020-10-22 06:19:25 ERROR YarnClusterScheduler:73 - Lost executor 8 on node1: Container killed by YARN for "
     "exceeding memory limits.  39.0 GB of 39 GB physical memory used.\n", "host_oom_killer"),
    ("RuntimeError: A subprocess exited unexpectedly with status -9\n", "host_oom_killer"),
    ("Killedg in train batch: 127687 / 263115\n", "host_oom_killer"),
    ("ImportError: DLL load failed while importing _pywrap_tensorflow_internal: Die Auslagerungsdatei ist zu klein, "
     "um diesen Vorgang durchzuführen.\n", "cpu_allocator"),   # Windows' commit limit, in German
])
def test_host_deaths_in_other_tools_words(text, kind):
    assert [e["kind"] for e in report(text)["oom_events"]] == [kind]


@pytest.mark.parametrize("text", [
    "joblib.externals.loky.process_executor.TerminatedWorkerError: The exit codes of the workers are {EXIT(1)}\n",
    "[12] 4 killed\n",                                                  # a game's score line, no job report
    "Killedgrass 4 times in round 3\n",                                 # no progress line under it
    "WARNING: failed to allocate memory for the cache, cudaMalloc retried later\n",   # no failure of the call
    "    except tf.errors.ResourceExhaustedError:  # out of memory, halve the batch\n",   # printed source
    "Check failed: error == cudaSuccess CUDA error invalid argument at memory.h:131\n",   # another CUDA error
    # a restart that failed, or one a client logs at debug level after being asked for it
    "[E 10:02:11.371 NotebookApp] kernel 0d3bd4a8-19a2-4c1f-9f0e-2b8f6c3d1a77 restarted failed!\n",
    "DEBUG:jupyter_client:Kernel 0d3bd4a8-19a2-4c1f-9f0e-2b8f6c3d1a77 restarted by request\n",
])
def test_what_only_looks_like_those_deaths(text):
    assert report(text)["oom_events"] == []


def test_a_notebook_kernel_restart_after_a_traceback_is_not_the_failure():
    d = report("Traceback (most recent call last):\n  File \"x.py\", line 1, in <module>\nValueError: bad shape\n"
               "KernelRestarter: restarting kernel (1/5), keep random ports\n")
    assert d["oom_events"] == []


def test_prose_that_mentions_reserved_memory_is_no_reading():
    assert report("vLLM: memory reserved 3 GB by other processes\n")["memory_samples"] == []


def test_a_pytorch_environment_report_naming_jaxlib_is_not_a_jax_job():
    d = report("- JaxLib version: not installed\ntorch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 "
               "GiB. GPU 0 has a total capacity of 79.18 GiB of which 1.00 GiB is free.\n")
    assert d["environment"]["framework"] != "jax"


@pytest.mark.parametrize("node, phase", [
    ("gradient_tape/model/dense/MatMul/MatMul_1", "backward"),
    ("save/Assign_17", "checkpoint_load"),
    ("IteratorGetNext", "data_loading"),
])
def test_more_of_tensorflows_node_scopes(node, phase):
    assert report(_TF_OOM_LINE + f"\t [[{{{{node {node}}}}}]]\n")["phase"] == phase


def test_a_classifiers_loss_node_is_not_the_vocabulary():
    d = report(_TF_OOM_LINE + "\t [[{{node gradients/sparse_softmax_cross_entropy_loss/xentropy_grad/mul}}]]\n")
    assert d["diagnoses"][0]["incident"] != "large-vocab-logits"
    d = report(_TF_OOM_LINE + "\t [[{{node dynamic_seq2seq/decoder/output_projection/Tensordot/MatMul}}]]\n")
    assert d["diagnoses"][0]["incident"] == "large-vocab-logits"


def test_the_cpu_allocators_message_without_its_space_after_the_colon():
    (ev,) = report("RuntimeError: [enforce fail at CPUAllocator.cpp:64]. DefaultCPUAllocator: can't allocate "
                   "memory:you tried to allocate 664833940224 bytes. Error code 12 (Cannot allocate memory)\n")["oom_events"]
    assert ev["kind"] == "cpu_allocator" and ev["tried_to_allocate_bytes"] == 664833940224


def test_the_kernels_oom_summary_cut_before_its_victim_is_a_kill():
    d = report("[4842680.894683] oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),cpuset=docker-1.scope,"
               "mems_allowed=0-1,oom_\nmemcg=/kubepods.slice/kubepods-burstable.slice,task_memcg=/kubepods.slice/kubepods-bur\n")
    (ev,) = d["oom_events"]
    assert ev["kind"] == "host_oom_killer" and "cgroup" in ev["detail"]
    assert d["diagnoses"][0]["incident"] == "host-oom"
    # a line that only names the field is no kill
    assert report("oom-kill:constraint= is printed by the kernel\n")["oom_events"] == []


@pytest.mark.parametrize("text, exc, kind", [
    # Intel's XPU builds: their own first words (a limit on one allocation's size), the old
    # allocator figures after them
    ("RuntimeError: Current platform can NOT allocate memory block with size larger than 4GB! Tried to allocate "
     "7.62 GiB (GPU  0; 15.11 GiB total capacity; 334.79 MiB already allocated; 474.00 MiB reserved in total by PyTorch)\n",
     "RuntimeError", "xpu"),
    # a screenshot read by OCR: the first words garbled, the figures intact
    ("torch.cuda.0utofemoryEror: CuDh out of menory. Tried to allocate 4.00 GiB.GPU 0 has a total capacty of16.0 GiB "
     "of which 3.72 GiB is free.\n", None, "cuda_caching_allocator"),
])
def test_the_allocators_figures_after_other_first_words(text, exc, kind):
    (ev,) = report(text)["oom_events"]
    assert ev["kind"] == kind and ev["device_index"] == 0 and ev["exception"] == exc
    assert ("larger than 4GB" in (ev["detail"] or "")) == (kind == "xpu")
    assert ev["message_format"] == "other first words (the allocator's figures after them)"
    assert ev["tried_to_allocate_bytes"] in (round(7.62 * 2**30), 4 * 2**30)
    assert ev["total_capacity_bytes"] in (round(15.11 * 2**30), 16 * 2**30)
    # words about a request with no allocator figures after them are not its message
    assert report("Note: Tried to allocate 4.00 GiB earlier without trouble\n")["oom_events"] == []


def test_a_gpu_librarys_own_error_record_of_memory_not_available():
    (ev,) = report("MIOpen Error: /data/repo/MIOpen/src/hip/handlehip.cpp:70: Memory not available to allocate "
                   "buffer: 655360000\n")["oom_events"]
    assert ev["kind"] == "device_runtime" and ev["backend"] == "HIP"
    # an ECC error's stale errno ("Cannot allocate memory") is a broken memory, not a full one
    assert report("CUDA Error: uncorrectable ECC error encountered: Cannot allocate memory\n")["oom_events"] == []


def test_a_bare_message_whose_own_tensors_hold_most_of_the_device_leads_to_activations():
    d = report("RuntimeError: CUDA out of memory. Tried to allocate 1.50 GiB (GPU 0; 15.78 GiB total capacity; "
               "13.19 GiB already allocated; 1.41 GiB free; 13.22 GiB reserved in total by PyTorch)\n")
    ranked = [x["incident"] for x in d["diagnoses"]]
    assert ranked[:2] == ["unknown-oom", "activation-memory"] and d["diagnoses"][1]["warning"]
    # ... not where other tensors, or nothing much, hold the device
    d = report("RuntimeError: CUDA out of memory. Tried to allocate 1.50 GiB (GPU 0; 15.78 GiB total capacity; "
               "3.19 GiB already allocated; 1.41 GiB free; 3.22 GiB reserved in total by PyTorch)\n")
    assert "activation-memory" not in [x["incident"] for x in d["diagnoses"]]


def test_chainers_updater_step_calling_its_model_is_a_forward():
    d = report("Exception in main training loop: out of memory to allocate 172800000 bytes (total 4223769600 bytes)\n"
               "Traceback (most recent call last):\n"
               '  File "/env/chainer/training/trainer.py", line 299, in run\n    update()\n'
               '  File "/env/chainer/training/updater.py", line 223, in update\n    self.update_core()\n'
               '  File "/env/chainer/training/updaters/standard_updater.py", line 207, in update_core\n'
               "    loss = _calc_loss(self._master, batch)\n"
               '  File "/env/chainer/training/updaters/standard_updater.py", line 236, in _calc_loss\n'
               "    return model(*in_arrays)\n"
               '  File "/src/models/text_recognition.py", line 80, in __call__\n'
               "    return self.recognition_net(images, h)\n")
    assert d["phase"] == "forward"
    # ... a network built, not called, says nothing of a step, even inside a training function
    assert report('Traceback (most recent call last):\n  File "/src/trainer.py", line 3, in train\n'
                  "    self.net = self.build_net(cfg)\n"
                  "RuntimeError: CUDA error: out of memory\n")["phase"] != "forward"


@pytest.mark.parametrize("text", [
    "RuntimeError: mmdet3d/ops/spconv/src/indice_cuda.cu 124\ncuda execution failed with error 2\n",
    "[2020-05-05 18:48:50] Error: CUDA error 2 'out of memory' - src/tensors/gpu/device.cu:38: cudaMalloc(&data_, size)\n",
])
def test_a_cuda_calls_status_2_is_the_runtimes_out_of_memory(text):
    d = report(text)
    assert [e["kind"] for e in d["oom_events"]] == ["cuda_runtime_error"]
    # ... where the line names its device allocation (cudaMalloc), not a lead to pinned host memory
    if "cudaMalloc(" in text:
        assert "pinned-memory" not in [x["incident"] for x in d["diagnoses"]]


@pytest.mark.parametrize("text", ["CUDA error 20 in kernel launch\n", "cuda error 2.5 percent\n",
                                  "NCCL error 2: unhandled system error\n"])
def test_other_status_numbers_are_not_out_of_memory(text):
    assert not [e for e in report(text)["oom_events"] if e["kind"] == "cuda_runtime_error"]


def test_a_loss_function_computed_from_the_steps_outputs_is_the_forward():
    d = report('Traceback (most recent call last):\n  File "train.py", line 447, in train_and_evaluate\n'
               "    loss_fm = feature_loss(fmap_r, fmap_g)\n  File \"/src/train/losses.py\", line 11, in feature_loss\n"
               "    loss += torch.mean(torch.abs(rl - gl))\n"
               "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB (GPU 0; 6.00 GiB total "
               "capacity; 4.89 GiB already allocated; 0 bytes free; 5.31 GiB reserved in total by PyTorch)\n")
    assert d["phase"] == "forward"


@pytest.mark.parametrize("function", ["compute_val_loss", "log_loss", "reduce_loss"])
def test_a_function_that_logs_averages_or_validates_a_loss_is_not_the_forward(function):
    d = report('Traceback (most recent call last):\n  File "train.py", line 40, in train\n'
               f"    {function}(outputs)\n  File \"/src/utils.py\", line 11, in {function}\n"
               "    total = torch.stack(values).mean()\nRuntimeError: CUDA error: out of memory\n")
    assert d["phase"] != "forward"


@pytest.mark.parametrize("text, kinds", [
    ("Cuda error 2 in conv kernel\n", ["cuda_runtime_error"]),
    ("CUDA Error 2: out of memory\n", ["cuda_runtime_error"]),
    ("Recoverable error: GPU ran out of memory, reducing batch size\n", []),
    ("hipBLAS error: failed to allocate memory for the workspace\n", ["device_runtime"]),
])
def test_more_spellings_of_library_errors(text, kinds):
    assert [e["kind"] for e in report(text)["oom_events"]] == kinds


_BARE_OOM = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.\n"


@pytest.mark.parametrize("config,strategy", [
    ("fsdp_sharding_strategy: SHARD_GRAD_OP\n", "SHARD_GRAD_OP"),
    ("  fsdp_config:\n    fsdp_sharding_strategy: 2\n", "SHARD_GRAD_OP"),      # accelerate's number
    ("fsdp_sharding_strategy=ShardingStrategy._HYBRID_SHARD_ZERO2,\n", "HYBRID_SHARD_ZERO2"),
    ("fsdp: shard_grad_op auto_wrap\n", "SHARD_GRAD_OP"),                      # transformers' option words
    ("sharding_strategy: FULL_SHARD\n", "FULL_SHARD"),
    ("sharding_strategy: stage2\n", None),                                     # another framework's key
])
def test_fsdp_sharding_strategy_is_read(config, strategy):
    assert report(config + _BARE_OOM)["environment"]["fsdp_sharding_strategy"] == strategy


def _setup(text: str):
    from oomdoctor.memory.setup import read_setup
    from oomdoctor.pipeline import facts_from_view
    from oomdoctor.read.reader import read_view
    return read_setup(facts_from_view(read_view(io.BytesIO(text.encode()), None))[0])


@pytest.mark.parametrize("config,stage,sharding", [
    ("fsdp_sharding_strategy: SHARD_GRAD_OP\n", 2, "FSDP (SHARD_GRAD_OP)"),
    ("fsdp_sharding_strategy: ShardingStrategy._HYBRID_SHARD_ZERO2\n", 2, "FSDP (HYBRID_SHARD_ZERO2)"),
    ("fsdp_sharding_strategy: 1\n", 3, "FSDP (FULL_SHARD)"),
    ("fsdp_reshard_after_forward: false\n", 2, "FSDP (SHARD_GRAD_OP)"),   # FSDP2
    ("fsdp: true\n", 3, "FSDP (FULL_SHARD)"),                             # assumed, and said so
])
def test_fsdp_strategy_sets_the_sharding_of_the_memory_model(config, stage, sharding):
    st = _setup(config + "world_size: 8\n" + _BARE_OOM)
    assert (st.zero_stage, st.sharding) == (stage, sharding)
    assert any("FULL_SHARD assumed" in a for a in st.assumptions) == (config == "fsdp: true\n")


def _markers(text: str) -> dict:
    from oomdoctor.pipeline import facts_from_view
    from oomdoctor.read.reader import read_view
    return facts_from_view(read_view(io.BytesIO(text.encode()), None))[0].markers


def test_generation_marker_from_the_failure_frames_or_the_config():
    frames = ('Traceback (most recent call last):\n'
              '  File "/x/site-packages/transformers/generation/utils.py", line 2802, in generate\n'
              '    result = decoding_method(\n')
    assert _markers(frames + _BARE_OOM).get("generation") == [2]
    assert _markers("predict_with_generate: true\n" + _BARE_OOM).get("generation") == [1]
    assert "generation" not in _markers("predict_with_generate: false\n" + _BARE_OOM)
    # a generating run's first fix bounds the generation, not the logits kept for metrics
    assert report(frames + _BARE_OOM)["diagnoses"][0]["remediations"][0]["id"] == "bound-generation"
    train = frames.replace("generation/utils.py", "trainer.py").replace("in generate", "in training_step")
    assert "generation" not in _markers(train + _BARE_OOM)
    # a scheduler's or a sampler's "_sample", a text_generation package's helpers: no generation loop
    for other in ('  File "/x/diffusers/schedulers/scheduling_ddpm.py", line 2, in _sample\n',
                  '  File "/x/text_generation/utils.py", line 2, in collate\n'):
        assert "generation" not in _markers("Traceback (most recent call last):\n" + other + "    x\n" + _BARE_OOM)
    assert _markers("python run_summarization.py --predict_with_generate --do_eval\n" + _BARE_OOM).get("generation")
    assert "generation" not in _markers("python run.py --predict_with_generate False\n" + _BARE_OOM)


def test_a_replica_s_reraised_out_of_memory_error_is_the_allocator_s():
    # DataParallel (and a DataLoader worker) re-raise under the original class; the original
    # message, in the "Original Traceback" below, may be cut from the paste
    d = report("2024-01-12T19:26:34.787+08:00                torch.cuda.OutOfMemoryError: "
               "Caught OutOfMemoryError in replica 0 on device 0.\n")
    assert [(e["kind"], e["device_index"]) for e in d["oom_events"]] == [("cuda_caching_allocator", 0)]
    full = report("torch.cuda.OutOfMemoryError: Caught OutOfMemoryError in replica 1 on device 1.\n"
                  "Original Traceback (most recent call last):\n  File \"a.py\", line 1, in f\n    x()\n"
                  "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB (GPU 1; 15.00 GiB "
                  "total capacity; 13.00 GiB already allocated; 100.00 MiB free; 13.50 GiB reserved in total by PyTorch)\n")
    assert len(full["oom_events"]) == 1 and full["oom_events"][0]["tried_to_allocate_bytes"] == 2 * 2**30
    assert report("RuntimeError: Caught RuntimeError in replica 0 on device 0.\n")["oom_events"] == []


def test_bold_in_a_message_glued_after_an_indented_code_line_is_dropped():
    d = report("    num_rendered, color = _C.rasterize_gaussians(*args)" + " " * 40
               + "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate **35.79 GiB**\n")
    assert abs(d["oom_events"][0]["tried_to_allocate_bytes"] - 35.79 * 2**30) < 2**20


def test_bfc_memory_dump_without_its_error_line_is_an_out_of_memory():
    warning = ("2018-06-13 08:22:41.461324: W T:\\src\\tensorflow\\core\\common_runtime\\bfc_allocator.cc:219] "
               "Allocator (GPU_0_bfc) ran out of memory trying to allocate 1.17GiB. The caller indicates that this is "
               "not a failure, but may mean that there could be performance gains if more memory were available.\n")
    dump = ("2018-06-13 08:25:52.813991: I T:\\src\\tensorflow\\core\\common_runtime\\bfc_allocator.cc:665] "
            "Chunk at 0000000C0439DD00 of size 983040\n")
    assert report(warning)["oom_events"] == []               # the retry warning is no failure
    events = report(warning + "\n" + dump)["oom_events"]
    assert [(e["kind"], e["message_format"], e["strength"]) for e in events] == [("xla", "bfc-memory-dump", "likely")]
    assert report("I tensorflow/core/common_runtime/bfc_allocator.cc:1088] Sum Total of in-use chunks: 10.25GiB\n")[
        "oom_events"][0]["message_format"] == "bfc-memory-dump"
    assert report("Chunk at 0000000C0439DD00 of size 983040\n")["oom_events"] == []   # no allocator named
    # Linux logs: the logger's prefix naming bfc_allocator.cc is stripped from the text; TF 2's free rows
    for row in ("2018-06-13 08:25:52.813991: I tensorflow/core/common_runtime/bfc_allocator.cc:665] "
                "InUse at 7f2b8e000000 of size 1280 next 5",
                "2018-06-13 08:25:52.813991: I tensorflow/core/common_runtime/bfc_allocator.cc:665] "
                "Free  at 7f2b8e000000 of size 1280 next 5"):
        assert [(e["backend"], e["message_format"]) for e in report(row + "\n")["oom_events"]] == [("TF", "bfc-memory-dump")]
    # XLA's own copy of the allocator, under JAX: not TensorFlow's
    jax_row = "I1126 21:28:55.546016  582 bfc_allocator.cc:1049] InUse at 7f2b8e000000 of size 1280 next 1\n"
    assert [e["backend"] for e in report(jax_row)["oom_events"]] == [None]


@pytest.mark.parametrize("line,strength", [
    ('The job has been killed by "OOM Killer", please check your job\'s memory usage.', "certain"),
    ("The container was killed by the OOM killer.", "certain"),
    ("The job may have been killed by the OOM killer.", None),
    ("Check whether the job was terminated by oom-killer", None),
    ("I first thought the job was killed by the OOM killer, but then I saw this:", None),
    ("e.g. the task was killed by the OOM killer", None),
    ("If the train.py job was killed by the OOM killer, add memory", None),
    ("The process was killed by the OOM killer.", None),     # not the unit a platform runs
    # Ray's list of a dead worker's possible causes
    ("Some common causes include: (1) the process was killed by the OOM killer due to high memory usage, "
     "(2) ray stop --force was called, or (3) the worker crashed unexpectedly", None),
])
def test_a_platform_s_report_of_the_oom_killer(line, strength):
    events = report(line + "\n")["oom_events"]
    assert [e["strength"] for e in events] == ([strength] if strength else [])


def test_a_traceback_in_ray_s_memory_monitor_check_is_a_host_oom():
    d = report("ERROR worker.py:1074 -- Possible unhandled error from worker: ray::ImplicitFunc.__init__()\n"
               '  File "python/ray/_raylet.pyx", line 440, in ray._raylet.execute_task\n'
               '  File "/x/site-packages/ray/memory_monitor.py", line 128, in raise_if_low_memory\n')
    assert [(e["kind"], e["strength"]) for e in d["oom_events"]] == [("host_oom_killer", "likely")]


def test_phase_from_a_pretrained_load_call_an_xla_program_and_a_keras_layer():
    xla = ("XlaRuntimeError: RESOURCE_EXHAUSTED: Error allocating device buffer: Attempting to allocate 4.39G. "
           "That was not possible. There are 2.30G free.; (0x0x0_HBM0)\n")
    assert report('keras_nlp.models.GemmaCausalLM.from_preset("hf://google/gemma-2-27b-it")\n\n' + xla)["phase"] == "model_load"
    compiled = ('RESOURCE_EXHAUSTED: XLA:TPU compile permanent error. Ran out of memory in memory space hbm. '
                'Used 30.21G of 15.48G hbm. Exceeded hbm capacity by 14.73G.\n'
                '     Operator: op_name="pjit(generate)/jit(main)/Model/embed/convert_element_type" source_line=3\n')
    assert report(compiled)["phase"] == "eval"
    assert report(compiled.replace("pjit(generate)", "pjit(train_step)"))["phase"] is None
    # the failed program's name decides, not a later report's; a name that only contains an
    # evaluation word is no evaluation
    later = compiled.replace("pjit(generate)", "pjit(train_step)") + '     Operator: op_name="jit(predict)/dot"\n'
    assert report(later)["phase"] is None
    assert report(compiled.replace("pjit(generate)", "pjit(train_and_eval)"))["phase"] is None
    assert report('tok = AutoTokenizer.from_pretrained("x")\n\n' + xla)["phase"] is None   # loads no weights
    keras = ("OutOfMemoryError: Exception encountered when calling Softmax.call().\n\nCUDA out of memory. Tried to "
             "allocate 1.53 GiB. GPU 0 has a total capacity of 14.56 GiB of which 155.81 MiB is free. Including "
             "non-PyTorch memory, this process has 14.41 GiB memory in use. Of the allocated memory 11.79 GiB is "
             "allocated by PyTorch, and 1.49 GiB is reserved by PyTorch but unallocated.\n")
    assert report(keras)["phase"] == "forward"


@pytest.mark.parametrize("line,kind", [
    ("RuntimeError:DataLoader worker(pid xxxxx) is killed by signal:killed.", "dataloader_killed"),   # retyped
    ("RuntimeError: DataLoader worker (pid 1234) is killed by signal: Killed.", "dataloader_killed"),
    ("RuntimeError: DataLoader worker (pid 1234) is killed by signal: Segmentation fault.", None),
    ("RuntimeError: DataLoader worker (pid 1234) is killed by signal: Killed", "dataloader_killed"),   # no period
])
def test_dataloader_worker_killed_as_users_retype_it(line, kind):
    assert [e["kind"] for e in report(line + "\n")["oom_events"]] == ([kind] if kind else [])


def test_a_module_named_for_loading_data_is_the_data_loading():
    # a data-loading library's or a script's own module ("batchgenerators/dataloading/data_loader.py")
    tb = ("Traceback (most recent call last):\n"
          '  File "/x/run_training.py", line 20, in <module>\n    item = next(data_loader)\n'
          '  File "/x/site-packages/batchgenerators/dataloading/{name}", line 126, in __next__\n'
          "    return self.generate_train_batch()\n"
          "numpy.core._exceptions._ArrayMemoryError: Unable to allocate 1.20 GiB for an array with shape "
          "(1, 512, 512, 600) and data type float64\n")
    assert report(tb.format(name="data_loader.py"))["phase"] == "data_loading"
    # ... not a module whose name only holds the words
    assert report(tb.format(name="metadata_loader_utils.py"))["phase"] != "data_loading"


@pytest.mark.parametrize("code, loads", [
    ('pipe = transformers.pipeline(model="fixie-ai/ultravox", trust_remote_code=True)', True),
    ('pipe = pipeline("text-generation", model=path, device=0)', True),
    ("out = pipe(audio, max_new_tokens=30)", False),            # the pipeline called: inference
])
def test_transformers_pipeline_factory_given_a_model_loads_it(code, loads):
    tb = ("Traceback (most recent call last):\n  File \"/x/run.py\", line 7, in <module>\n    " + code + "\n"
          "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB. GPU 0 has a total capacity of "
          "23.65 GiB of which 10.31 MiB is free.\n")
    assert (report(tb)["phase"] == "model_load") is loads


def test_a_dataloader_worker_on_the_gpu_shares_it_with_its_own_job():
    oom = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 23.75 GiB. GPU 0 has a total capacity of "
           "79.18 GiB of which 6.38 GiB is free. Process 451 has 48.01 GiB memory in use. Process 478 has 24.26 GiB "
           "memory in use. Including non-PyTorch memory, this process has 518.00 MiB memory in use. Of the allocated "
           "memory 0 bytes is allocated by PyTorch, and 0 bytes is reserved by PyTorch but unallocated.\n")
    worker = ("torch.OutOfMemoryError: Caught OutOfMemoryError in DataLoader worker process 0.\n"
              "Original Traceback (most recent call last):\n"
              '  File "/x/site-packages/torch/utils/data/_utils/worker.py", line 358, in _worker_loop\n'
              "    data = fetcher.fetch(index)\n"
              '  File "/x/train.py", line 10, in __getitem__\n'
              '    x = torch.empty(n, device="cuda")\n')
    d = report(worker + oom)
    assert d["diagnoses"][0]["incident"] == "ranks-share-gpu"
    assert d["diagnoses"][0]["remediations"][0]["id"] == "dataloader-workers-off-cuda"
    assert report(oom)["diagnoses"][0]["incident"] == "stale-gpu-process"     # the same figures, no worker
    # the main process's re-raise alone says it (its original traceback cut from the paste)
    reraised = "torch.OutOfMemoryError: Caught OutOfMemoryError in DataLoader worker process 0.\n"
    assert report(reraised + oom)["diagnoses"][0]["incident"] == "ranks-share-gpu"
    # no more of the listed processes are the job's than it has (main + num_workers): here
    # one worker, so the third process, the smallest, is foreign
    from oomdoctor.kb.table import fact_table
    from oomdoctor.pipeline import facts_from_view
    from oomdoctor.read.reader import read_view
    three = oom.replace("Process 478 has", "Process 9001 has 2.00 GiB memory in use. Process 478 has")
    facts = facts_from_view(read_view(io.BytesIO(("dataloader_num_workers: 1\n" + worker + three).encode()), None))[0]
    table = fact_table(facts)
    assert (table["oom.job_processes"], table["oom.other_process_count"]) == (2, 1)


@pytest.mark.parametrize("line,stage", [
    ('  File "/x/trl/trainer/online_dpo_trainer.py", line 5, in training_step', "online_dpo"),
    ("trainer = RLOOTrainer(", "rloo"), ("trainer = XPOTrainer(", "online_dpo"), ("rlhf_type: rloo", "rloo"),
])
def test_trl_online_trainers_are_stages_of_their_own(line, stage):
    assert report(line + "\n" + _BARE_OOM)["environment"]["stage"] == stage


def _top(d: dict):
    return d["diagnoses"][0]["incident"] if d["diagnoses"] else None


@pytest.mark.parametrize("request_gib,absurd", [
    ("22343.33", False),       # 940 times the card: a real computation (a sparse matrix made dense)
    ("1000000.00", False),     # 42,000 times (a dense p x p matrix of a model's parameters); 100,000 is the line
    ("67109892.01", True),     # 2**56 bytes on a 24 GiB card: a wrapped or garbage size
])
def test_a_request_far_over_the_device_is_memory_unless_no_computation_could_ask_it(request_gib, absurd):
    d = report(f"torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate {request_gib} GiB. GPU 0 has a total "
               "capacity of 23.68 GiB of which 16.81 GiB is free. Including non-PyTorch memory, this process has 6.87 GiB "
               "memory in use. Of the allocated memory 4.71 GiB is allocated by PyTorch, and 1.91 GiB is reserved by "
               "PyTorch but unallocated.\n")
    assert bool(d["oom_events"][0]["symptom"]) is absurd
    assert (_top(d) is None) is absurd
    assert any("no batch size or setting makes it fit" in n for n in d["notes"]) is not absurd


def test_a_terminals_wrap_padding_inside_the_allocator_message_is_taken_out():
    pad = " " * 48
    d = report("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1008.00 MiB. GPU 0 has a total capacity of "
               f"79.15 GiB of which 769.81 MiB is free. Includi{pad}ng non-PyTorch memory, this process has 78.37 GiB memory "
               f"in use. Of the allocated memory 65.60 GiB is allocated by PyTorch, and 12.26 GiB is reserved b{pad}y "
               "PyTorch but unallocated.\n")
    ev = d["oom_events"][0]
    assert abs(ev["processes"][0]["bytes"] - 78.37 * 2**30) < 2
    assert abs(ev["reserved_unallocated_bytes"] - 12.26 * 2**30) < 2


def test_allocator_figures_a_user_shortened_are_read():
    d = report("Tried to allocate 3.22 GiB. GPU 1 has a total capacity of 23.69 GiB, of which 2.03 GiB is free. Including "
               "non-PyTorch memory, this process has 21.65 GiB in use.\n")
    assert abs(d["oom_events"][0]["processes"][0]["bytes"] - 21.65 * 2**30) < 2
    d = report("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.96 GiB.\n"
               "GPU 4 has a total capacity of 79.11 GiB of which 1.07 GiB is free.\n"
               "... 73.15 GiB is allocated by PyTorch ...\n")
    assert abs(d["oom_events"][0]["allocated_by_pytorch_bytes"] - 73.15 * 2**30) < 2


@pytest.mark.parametrize("line", [
    "LLVM ERROR: out of memory",
    "cv2.error: OpenCV(4.6.0) /io/opencv/modules/core/src/alloc.cpp:73: error: (-4:Insufficient memory) Failed to "
    "allocate 4672512 bytes in function 'OutOfMemoryError'",
    "cv2.error: OpenCV(4.5.5) D:\\a\\opencv-python\\opencv\\modules\\core\\src\\alloc.cpp:73: error: (-4:Insufficient "
    "memory) Failed to allocate 2764800 bytes in function 'cv::OutOfMemoryError'",
])
def test_host_allocation_failures_of_embedded_libraries(line):
    d = report("[LightGBM] [Info] Compiling OpenCL Kernel with 64 bins...\n" + line + "\n*** Aborted\n")
    assert [e["kind"] for e in d["oom_events"]] == ["cpu_allocator"]
    assert _top(d) == "host-oom"


def test_a_lowercase_error_class_without_a_side_is_left_alone():
    # the module's own error class is an error line, but "memory" alone names no side
    assert report("cv2.error: could not allocate memory for the window\n")["oom_events"] == []


def test_a_debuggers_sigbus_in_a_shared_memory_call_is_shared_memory():
    d = report('Thread 787 "imagenet_fake_d" received signal SIGBUS, Bus error.\n'
               "0x00007f6b59544f3b in ncclShmOpen(char*, unsigned long, void**, void**, int, void**) () from "
               "/usr/local/lib/python3.10/dist-packages/jaxlib/xla_extension.so\n")
    assert _top(d) == "shm-exhausted"


@pytest.mark.parametrize("script,phase", [("test.py", "eval"), ("val.py", "eval"), ("test_image.py", None)])
def test_a_detection_trainers_val_or_test_module_is_evaluation(script, phase):
    d = report('Traceback (most recent call last):\n'
               '  File "train.py", line 537, in <module>\n'
               '    train(hyp, opt, device)\n'
               '  File "train.py", line 336, in train\n'
               f'    results = {script[:-3]}.run(opt.data)\n'
               f'  File "/code/yolo/{script}", line 134, in run\n'
               '    output = non_max_suppression(inf_out, conf_thres=conf_thres)\n'
               '  File "/code/yolo/utils/general.py", line 341, in non_max_suppression\n'
               '    i = torch.ops.torchvision.nms(boxes, scores, iou_thres)\n'
               "RuntimeError: CUDA out of memory. Tried to allocate 10.49 GiB (GPU 0; 10.91 GiB total capacity; "
               "618.68 MiB already allocated; 6.45 GiB free; 3.78 GiB reserved in total by PyTorch)\n")
    assert d["phase"] == phase


def test_a_training_run_in_a_script_named_test_py_is_not_evaluation():
    d = report('Traceback (most recent call last):\n'
               '  File "/home/user/proj/test.py", line 40, in <module>\n'
               '    out = model(input_ids=batch)\n'
               '  File "/x/site-packages/transformers/models/llama/modeling_llama.py", line 1180, in forward\n'
               '    logits = self.lm_head(hidden_states)\n'
               "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity "
               "of 79.15 GiB of which 1.20 GiB is free. Including non-PyTorch memory, this process has 77.93 GiB memory "
               "in use. Of the allocated memory 71.02 GiB is allocated by PyTorch, and 5.40 GiB is reserved by PyTorch "
               "but unallocated.\n")
    assert d["phase"] == "forward"


@pytest.mark.parametrize("log,request_bytes,count", [
    # TensorRT 8 and later: its error record, and the request on the warning beside it
    ("[11/22/2024-13:40:47] [E] Error[1]: [defaultAllocator.cpp::allocate::31] Error Code 1: Cuda Runtime (out of memory)\n"
     "[11/22/2024-13:40:47] [W] [TRT] Requested amount of GPU memory (15485030400 bytes) could not be allocated. There "
     "may not be enough free memory for allocation to succeed.\n", 15485030400, 1),
    # TensorRT 5-7: the same failure twice is one event seen twice
    ("[09/29/2022-16:59:38] [E] [TRT] ../rtSafe/safeRuntime.cpp (25) - Cuda Error in allocate: 2 (out of memory)\n"
     "[09/29/2022-16:59:38] [E] [TRT] ../rtSafe/safeRuntime.cpp (25) - Cuda Error in allocate: 2 (out of memory)\n", None, 2),
    ("[03/07/2020-16:57:34] [E] [TRT] C:\\source\\builder\\tacticOptimizer.cpp (1523) - OutOfMemory Error in "
     "nvinfer1::builder::`anonymous-namespace'::LeafCNode::computeCosts: 0\n", None, 1),
])
def test_tensorrts_own_allocation_failures_are_read(log, request_bytes, count):
    evs = report(log)["oom_events"]
    assert [(e["kind"], e["message_format"]) for e in evs] == [("cuda_runtime_error", "tensorrt")]
    assert evs[0]["tried_to_allocate_bytes"] == request_bytes and evs[0]["count"] == count


def test_a_tensorrt_warning_alone_is_not_a_failure():
    assert report("[W] [TRT] Requested amount of GPU memory (1048576 bytes) could not be allocated. There may not be "
                  "enough free memory for allocation to succeed.\n[I] [TRT] Engine built in 41.2 s.\n")["oom_events"] == []


def _incidents(d: dict) -> list[str]:
    return [x["incident"] for x in d["diagnoses"]]


_OOM_2_11 = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 398.00 MiB. GPU 0 has a total capacity of "
             "79.18 GiB of which 68.19 MiB is free. Including non-PyTorch memory, this process has 79.10 GiB memory in "
             "use. Of the allocated memory 78.02 GiB is allocated by PyTorch, and 366.87 MiB is reserved by PyTorch "
             "but unallocated.\n")


def test_a_peak_beside_a_flat_allocated_figure_is_no_leak():
    steps = "".join(f"step {i} | loss 2.3 | allocated 20.10 GiB | peak allocated {30 + 1.5 * i:.2f} GiB\n"
                    for i in range(30))
    d = report(steps + _OOM_2_11)
    assert "gradual-leak" not in _incidents(d)[:1]
    readings = [s for s in d["memory_samples"] if s["source"] == "user_print"]
    assert {s["allocated_bytes"] for s in readings} == {round(20.10 * 2**30)}
    assert readings[-1]["max_allocated_bytes"] == round(73.5 * 2**30)


def test_a_training_loops_own_allocated_print_shows_a_leak():
    steps = "".join(f"step {i} loss 0.0008 allocated {2.0 + 1.94 * i:.2f} GiB\n" for i in range(30))
    d = report(steps + _OOM_2_11)
    assert _incidents(d)[0] == "gradual-leak"
    assert len([s for s in d["memory_samples"] if s["allocated_bytes"]]) == 30


@pytest.mark.parametrize("line", [
    # the allocator's own figures are not a loop's reading
    "RuntimeError: CUDA out of memory. Tried to allocate 20.00 MiB (GPU 0; 10.76 GiB total capacity; "
    "9.48 GiB already allocated; 16.56 MiB free; 9.66 GiB reserved in total by PyTorch)",
    "RuntimeError: MPS backend out of memory (MPS allocated: 45.18 GiB, other allocations: 719.81 MiB, "
    "max allowed: 45.90 GiB). Tried to allocate 256 bytes on private pool.",
    "(MPS allocated: 45.18 GiB,",         # the same message wrapped: its line alone
    "step 3 allocated 12 tensors",        # no unit: a count, not memory
    "INFO Allocated 4.00 GB host memory for the KV cache",
    "Reserved 12 GB/s of bandwidth",
    "memory reserved 3 GB by other processes",
])
def test_what_is_not_a_loops_allocated_reading(line: str):
    d = report(line + "\n")
    assert not [s for s in d["memory_samples"] if s["source"] == "user_print"]


def test_a_runtime_oom_while_placing_the_model_is_the_context():
    d = report("Traceback (most recent call last):\n"
               '  File "train.py", line 40, in <module>\n'
               "    model = model.cuda()\n"
               '  File "/usr/lib/python3.10/site-packages/torch/nn/modules/module.py", line 905, in _apply\n'
               "    param_applied = fn(param)\n"
               '  File "/usr/lib/python3.10/site-packages/torch/nn/modules/module.py", line 1150, in convert\n'
               "    return t.to(device)\n"
               "RuntimeError: CUDA error: out of memory\n"
               "CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below "
               "might be incorrect.\n")
    assert _incidents(d)[0] == "stale-gpu-process"
    # mid-run (steps logged) the same error at a tensor's creation can be the process's own memory
    steps = "".join(f"step {i} loss 0.5\n" for i in range(20))
    d = report(steps + "Traceback (most recent call last):\n"
               '  File "train.py", line 88, in train_step\n'
               "    noise = torch.randn(x.shape, device=x.device)\n"
               "RuntimeError: CUDA error: out of memory\n")
    assert "stale-gpu-process" not in _incidents(d)[:1]
    # a library's own error with the same frames is not torch's context
    d = report("Traceback (most recent call last):\n"
               '  File "/usr/lib/python3.10/site-packages/torch/nn/modules/module.py", line 1150, in convert\n'
               "    return t.to(device)\n"
               "RuntimeError: CUresult error: 2 (out of memory)\n")
    assert "stale-gpu-process" not in _incidents(d)[:1]
    # the allocator's own message at the same place is the weights not fitting
    d = report("Traceback (most recent call last):\n"
               '  File "/usr/lib/python3.10/site-packages/torch/nn/modules/module.py", line 1150, in convert\n'
               "    return t.to(device)\n"
               "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of "
               "23.65 GiB of which 1.06 GiB is free. Including non-PyTorch memory, this process has 22.58 GiB memory "
               "in use. Of the allocated memory 22.10 GiB is allocated by PyTorch, and 12.00 MiB is reserved by "
               "PyTorch but unallocated.\n")
    assert "stale-gpu-process" not in _incidents(d)[:1]


def test_xla_request_printed_with_its_unit_and_device():
    d = report("jax.errors.JaxRuntimeError: RESOURCE_EXHAUSTED: Out of memory while trying to allocate 29.71GiB "
               "with allocator GPU_0_bfc on device 0. [tf-allocator-allocation-error='']\n")
    ev = d["oom_events"][0]
    assert ev["kind"] == "xla" and ev["device_index"] == 0
    assert ev["tried_to_allocate_bytes"] == round(29.71 * 2**30)
    d = report("RESOURCE_EXHAUSTED: Out of memory while trying to allocate 512B with allocator GPU_0_bfc on device 1.\n")
    assert (d["oom_events"][0]["tried_to_allocate_bytes"], d["oom_events"][0]["device_index"]) == (512, 1)


def test_a_bold_span_over_several_pasted_lines_is_unwrapped():
    d = report("**2020-02-01 11:57:36.437688: W tensorflow/core/framework/cpu_allocator_impl.cc:81] Allocation of "
               "10616832 exceeds 10% of system memory.\nKilled**\n")
    assert [e["kind"] for e in d["oom_events"]] == ["host_oom_killer"]
    from oomdoctor.read.normalise import normalise
    # one "**" inside a line, or code that starts with one, is no span's end
    assert normalise("def f(**kwargs):\n")[0].text == "def f(**kwargs):"
    assert normalise("**kwargs)\n")[0].text == "**kwargs)"
    # an exception named in a bold span that a later line closes
    assert normalise("**numpy.core._exceptions._ArrayMemoryError: Unable to allocate 3.2 GiB\n")[0].text.startswith(
        "numpy.core")
    assert normalise("**Killed\n")[0].text == "Killed"


def test_tensorflows_resource_exhausted_for_a_full_disk_is_no_memory():
    d = report("E ../checkpoint/model.ckpt-10051.data-00000-of-00001.tempstate1387; No space left on device\n"
               "E        [[node save/SaveV2 (defined at ./DeepSpeech.py:484)  = SaveV2[]]]\n"
               "E Hint: If you want to see a list of allocated tensors when OOM happens, add "
               "report_tensor_allocations_upon_oom to RunOptions for current allocation info.\n")
    assert d["oom_events"] == [] and d["diagnoses"] == []
    # a full disk reported earlier, by another error, says nothing of this one
    d = report("W tensorflow/core/util/events_writer.cc:104] Write failed: No space left on device\n\n"
               "step 10 loss 0.3\n"
               "E        [[node gradients/MatMul]]\n"
               "E Hint: If you want to see a list of allocated tensors when OOM happens, add "
               "report_tensor_allocations_upon_oom to RunOptions for current allocation info.\n")
    assert [e["kind"] for e in d["oom_events"]] == ["xla"]
    # the hint at the end of an error whose first line is not in the log still ends an
    # out-of-memory message
    d = report("E        [[node gradients/MatMul]]\n"
               "E Hint: If you want to see a list of allocated tensors when OOM happens, add "
               "report_tensor_allocations_upon_oom to RunOptions for current allocation info.\n")
    assert [e["kind"] for e in d["oom_events"]] == ["xla"]


def test_memoryerror_with_the_cpp_exception_after_two_dashes():
    d = report("Traceback (most recent call last):\n"
               '  File "prep.py", line 24, in <module>\n'
               "    torch.save(graph, path)\n"
               "MemoryError -- std::bad_alloc\n")
    assert [e["kind"] for e in d["oom_events"]] == ["cpu_allocator"]
    assert _incidents(d)[0] == "host-oom"


def test_a_logger_record_whose_message_is_an_error_saying_gpu_memory_is_short():
    d = report("02/15/2020 15:10:09 MainProcess     _training_0     multithreading  run                       DEBUG    "
               "Error in thread (_training_0): You do not have enough GPU memory available to train the selected "
               "model at the selected settings.\n")
    assert [(e["kind"], e["backend"]) for e in d["oom_events"]] == [("cuda_runtime_error", "CUDA")]
    # a record that is no error, advice, or a level word in prose is no failure
    assert report("02/15/2020 15:10:09 MainProcess  run  INFO     Tip: you do not have enough GPU memory "
                  "for batch 64, try 32\n")["oom_events"] == []
    assert report("RuntimeError: If you do not have enough GPU memory, reduce the batch size.\n")["oom_events"] == []
    assert report("the debug error handler: you do not have enough GPU memory\n")["oom_events"] == []
    d = report("2024-05-01 10:00:00,123 - ERROR - Exception in worker: You don't have enough GPU memory to run "
               "this model\n")
    assert [e["backend"] for e in d["oom_events"]] == ["CUDA"]


def test_a_named_device_allocation_call_that_failed_with_its_size():
    d = report("Faiss assertion 'cudaMalloc(p, size) == cudaSuccess' failed in void faiss::gpu::allocMemorySpace("
               "faiss::gpu::MemorySpace, void**, size_t) at utils/MemorySpace.cpp:20; details: Failed to cudaMalloc "
               "16000000000 bytes\nAborted\n")
    ev = d["oom_events"][0]
    assert (ev["kind"], ev["tried_to_allocate_bytes"]) == ("cuda_runtime_error", 16000000000)
    # Faiss's full form names the runtime's error too; two sizes are two failures
    d = report("Error: 'err == cudaSuccess' failed: failed to cudaMalloc 1610612736 bytes (error 2 out of memory)\n"
               "Error: 'err == cudaSuccess' failed: failed to cudaMalloc 1048576 bytes (error 2 out of memory)\n")
    assert sorted(e["tried_to_allocate_bytes"] for e in d["oom_events"]) == [1048576, 1610612736]


def test_a_go_supervisors_signal_killed_is_a_kill():
    d = report("load_tensors:    CUDA_Host model buffer size = 2850.75 MiB\n\n"
               "Error: 500 Internal Server Error: llama-server process has terminated: signal: killed\n")
    assert [(e["kind"], e["strength"]) for e in d["oom_events"]] == [("host_oom_killer", "weak")]
    assert report("the run's signal: killedness was not checked\n")["oom_events"] == []
    # a timeout's kill is no memory
    assert report("Error: llama-server: signal: killed (timeout 300s exceeded)\n")["oom_events"] == []


def test_memory_held_outside_the_process_outweighs_a_gather_for_a_save():
    d = report("Traceback (most recent call last):\n"
               '  File "/usr/local/lib/python3.8/site-packages/fairscale/nn/data_parallel/fully_sharded_data_parallel.py",'
               " line 1151, in summon_full_params\n"
               "    local_shard, _ = self._get_shard(full_tensor)\n"
               "RuntimeError: CUDA out of memory. Tried to allocate 98.00 MiB (GPU 1; 39.41 GiB total capacity; 14.54 GiB "
               "already allocated; 85.56 MiB free; 14.71 GiB reserved in total by PyTorch)\n")
    assert _incidents(d)[:2] == ["stale-gpu-process", "ckpt-save-gather"]


@pytest.mark.parametrize("line, strength", [
    ("srun: error: node1: task 0: Out Of Memory", "certain"),
    ("srun: error: Out Of Memory", "certain"),                        # pasted without node and task
    ("The replica master 0 ran out-of-memory and exited with a non-zero status of 247.", "certain"),
    # OpenMPI's report with the PID and node redacted by the user
    ("mpirun noticed that process rank 1 with PID xxxxxx on node xxxxxxxx exited on signal 9 (Killed).", "weak"),
])
def test_schedulers_and_platforms_reporting_a_task_out_of_memory(line: str, strength: str):
    d = report(line + "\n")
    assert [(e["kind"], e["strength"]) for e in d["oom_events"]] == [("host_oom_killer", strength)]


@pytest.mark.parametrize("line", [
    "srun: error: Unable to allocate resources: Out Of Memory on the controller's cache? no: job too big",
    "The replica master 0 exited with a non-zero status of 1.",
])
def test_what_is_not_a_task_out_of_memory(line: str):
    assert report(line + "\n")["oom_events"] == []


def test_a_dask_nanny_restarting_a_worker_over_its_memory_budget_is_a_host_kill():
    for line in ("distributed.nanny - WARNING - Worker exceeded 95% memory budget. Restarting",
                 "distributed.nanny.memory - WARNING - Worker tcp://127.0.0.1:40101 (pid=4242) exceeded 95% memory "
                 "budget. Restarting...",
                 # (two spaces after its sentence, as some versions print it)
                 "distributed.nanny - WARNING - Worker exceeded 95% memory budget.  Restarting"):
        d = report(line + "\n")
        assert [(e["kind"], e["strength"], e["message_format"]) for e in d["oom_events"]] == [
            ("host_oom_killer", "certain", "dask-nanny-memory")]
        assert _incidents(d)[0] == "host-oom"
    # its pause below the limit kills nothing
    assert report("distributed.worker - WARNING - Worker is at 81% memory usage. Pausing worker.\n")["oom_events"] == []


def test_a_dask_scheduler_refusing_a_task_over_its_workers_memory_limit_is_a_host_memory_failure():
    line = ("2024-09-06 14:32:04,799 - distributed.scheduler - ERROR - Task 'lambda-6a34' has 30.61 GiB worth of "
            "input dependencies, but worker tcp://127.0.0.1:57276 has memory_limit set to 14.90 GiB.\n")
    # the client receives the same words as a MemoryError: one failure, not two
    client = ("distributed.client - ERROR - MemoryError: Task 'lambda-6a34' has 30.61 GiB worth of input "
              "dependencies, but worker tcp://127.0.0.1:57276 has memory_limit set to 14.90 GiB.\n")
    for text in (line, line + client):
        d = report(text)
        assert [(e["kind"], e["message_format"], e["count"]) for e in d["oom_events"]] == [
            ("cpu_allocator", "dask-memory-limit", text.count("worth of"))]
        assert d["oom_events"][0]["tried_to_allocate_bytes"] == round(30.61 * 2**30)
        assert _incidents(d)[0] == "host-oom"
    # a worker's memory limit printed in its start-up banner is no refusal
    assert report("distributed.worker - INFO -               Memory:                  14.90 GiB\n"
                  "distributed.worker - INFO - memory_limit set to 14.90 GiB for worker tcp://127.0.0.1:57276\n"
                  )["oom_events"] == []


def test_catboosts_gpu_memory_pool_reports_its_request_and_free_memory_in_mb():
    d = report("Application terminated with error: (NCudaLib::TOutOfMemoryError) catboost/cuda/cuda_lib/memory_pool/"
               "stack_like_memory_pool.h:294: Error: Out of memory. Requested 1070.546387; Free 1010.952393\n")
    ev = d["oom_events"][0]
    assert (ev["kind"], ev["message_format"]) == ("cuda_runtime_error", "catboost-memory-pool")
    assert ev["tried_to_allocate_bytes"] == int(1070.546387 * 2**20)
    assert ev["free_bytes"] == int(1010.952393 * 2**20)
    # later releases print the unit
    d = report("Error: Out of memory. Requested 2048 MB; Free 512 MB\n")
    assert d["oom_events"][0]["tried_to_allocate_bytes"] == 2048 * 2**20
    # words about a request are no pool's figures
    assert report("Note: Out of memory. Requested pool size was reduced\n")["oom_events"] == []


def test_a_trainers_batch_retry_after_an_oom_is_an_out_of_memory_error():
    d = report("Steps:   0%| | 1/3000 [00:08<6:44:13,  8.09s/it, loss=0.0584]OOM Detected, reducing batch/grad size "
               "to 24/1.\nOOM Detected, reducing batch/grad size to 12/1.\n")
    [ev] = d["oom_events"]
    assert (ev["kind"], ev["message_format"], ev["count"]) == ("device_runtime", "batch-size-retry", 2)
    assert "last to 12" in ev["detail"]
    d = report("OOM Detected, reducing batch/grad size to 0/1.\n")
    assert "to zero" in d["oom_events"][0]["detail"]
    # the handler's name in prose, without a size it retried with, is no retry
    assert report("set oom_detected: true to log when an OOM is detected\n")["oom_events"] == []


def test_a_banner_that_says_it_does_not_resume_is_no_resume():
    base = ("  Num Epochs = 100\n  Batch Size Per Device = 49\n{}\n  Gradient Checkpointing: False\n"
            "RuntimeError: CUDA out of memory. Tried to allocate 20.00 MiB (GPU 0; 8.00 GiB total capacity; "
            "7.21 GiB already allocated; 0 bytes free; 7.32 GiB reserved in total by PyTorch)\n")
    assert report(base.format("  Resuming from checkpoint: False"))["phase"] != "checkpoint_load"
    assert report(base.format("  Resuming from checkpoint: None"))["phase"] != "checkpoint_load"
    assert report(base.format("Resuming from checkpoint: /ckpt/step-400"))["phase"] == "checkpoint_load"


def test_cublas_failing_beside_torchs_bad_index_message_is_a_knock_on():
    text = ("RuntimeError: CUDA error: CUBLAS_STATUS_NOT_INITIALIZED when calling `cublasCreate(handle)`\n\n"
            "index out of range in self\n")
    d = report(text)
    assert d["oom_events"][0]["symptom"] and "index out of range" in d["oom_events"][0]["symptom"]
    assert not [x for x in d["diagnoses"] if x["memory_failure"] and not x["warning"]]
    # alone, the cuBLAS failure still reads as memory
    alone = report(text.split("\n\n")[0] + "\n")
    assert alone["oom_events"][0]["symptom"] is None and _incidents(alone)


_ORT = ("2025-10-11 20:19:31.47 [E:onnxruntime:, sequential_executor.cc:572 onnxruntime::ExecuteKernel] Non-zero status "
        "code returned while running Mul node. Name:'/model/layers.14/mlp/act_fn/Mul' Status Message: "
        "D:\\a\\_work\\1\\s\\onnxruntime\\core\\framework\\bfc_arena.cc:359 onnxruntime::BFCArena::AllocateRawInternal "
        "Failed to allocate memory for requested buffer of size 159383552\n")


@pytest.mark.parametrize("before, kind, backend", [
    ("", "runtime_arena", None),   # the arena's message is the same for the CPU and the GPU providers
    ("session = ort.InferenceSession(path, providers=['CUDAExecutionProvider'])\n", "device_runtime", "CUDA"),
    ("UserWarning: Specified provider 'CUDAExecutionProvider' is not in available provider names.Available providers: "
     "'CPUExecutionProvider'\n", "cpu_allocator", "host"),
    ("session = ort.InferenceSession(path, providers=['CPUExecutionProvider'])\n", "cpu_allocator", "host"),
])
def test_onnx_runtimes_arena_failure_is_read_on_the_side_the_log_names(before: str, kind: str, backend):
    d = report(before + _ORT)
    [ev] = d["oom_events"]
    assert (ev["kind"], ev["backend"], ev["tried_to_allocate_bytes"]) == (kind, backend, 159383552)
    assert _incidents(d)[0] == {"runtime_arena": "unknown-oom", "device_runtime": "unknown-oom",
                                "cpu_allocator": "host-oom"}[kind]


def test_an_onnx_runtime_arena_failure_wrapped_by_the_paste_is_read_and_a_failed_session_is_a_load():
    # the long C++ signature pushes the message onto a line of its own
    d = report("RuntimeException: [ONNXRuntimeError] : 6 : RUNTIME_EXCEPTION : Exception during initialization: \n"
               "/onnxruntime_src/onnxruntime/core/framework/bfc_arena.cc:368 void* \n"
               "onnxruntime::BFCArena::AllocateRawInternal(size_t, bool, onnxruntime::Stream*, bool, \n"
               "onnxruntime::WaitNotificationFn) Failed to allocate memory for requested buffer of size 180355072\n")
    [ev] = d["oom_events"]
    assert (ev["kind"], ev["tried_to_allocate_bytes"], ev["line"]) == ("runtime_arena", 180355072, 4)
    assert (d["phase"], _incidents(d)[0]) == ("model_load", "model-load")


@pytest.mark.parametrize("text", [
    # the message alone on a line, with no arena function above it
    "Failed to allocate memory for requested buffer of size 180355072\n",
    # a blank line between: two messages, not one wrapped
    "onnxruntime::BFCArena::AllocateRawInternal(size_t, bool, onnxruntime::Stream*, bool, \n\n"
    "onnxruntime::WaitNotificationFn) Failed to allocate memory for requested buffer of size 180355072\n",
])
def test_an_arena_message_without_its_function_is_not_read_as_one(text):
    assert report(text)["oom_events"] == []


def test_an_onnx_session_created_well_is_no_load_failure():
    d = report("[ONNXRuntimeError] : 6 : RUNTIME_EXCEPTION : Non-zero status code returned while running Mul node.\n"
               + _ORT)
    assert d["phase"] != "model_load"


@pytest.mark.parametrize("text, n", [
    ("ResourceExhaustedError: Fail to alloc memory of 564023296 size, error code is 12.\n"
     "      [Hint: Expected error == 0, but received error:12 != 0:0.] (at /paddle/paddle/fluid/memory/detail/system_allocator.cc:66)\n"
     "      [operator < conv2d > error]\n", 564023296),
    # Paddle 1.x: the enforce of the same call, the size on the next line
    ("paddle.fluid.core.EnforceNotMet: Enforce failed. Expected posix_memalign(&p, alignment, size) == 0, but received "
     "posix_memalign(&p, alignment, size):12 != 0:0.\n"
     "Alloc 524288000 error! at [/paddle/paddle/fluid/memory/detail/system_allocator.cc:51]\n", 524288000),
])
def test_paddles_cpu_allocator_failure_is_the_hosts_memory(text, n):
    d = report(text)
    [ev] = d["oom_events"]
    assert (ev["kind"], ev["tried_to_allocate_bytes"]) == ("cpu_allocator", n)
    assert _incidents(d)[0] == "host-oom"


@pytest.mark.parametrize("text", [
    # the GPU's memory, in Paddle's own words: not the host's
    "ResourceExhaustedError: Out of memory error on GPU 0. Cannot allocate 1.000000GB memory on GPU 0, 10.5GB "
    "memory has been allocated and available memory is only 20.0MB.\n",
    # posix_memalign failing with another code (EINVAL, a bad alignment) is no memory shortage
    "Expected posix_memalign(&p, alignment, size) == 0, but received posix_memalign(&p, alignment, size):22 != 0:0.\n",
])
def test_paddle_failures_that_are_not_its_cpu_allocator_running_out(text):
    assert all(ev["kind"] != "cpu_allocator" for ev in report(text)["oom_events"])


def test_an_onnx_runtime_arena_request_no_device_has_is_a_symptom():
    d = report(_ORT.replace("159383552", "4585490524328388608"))
    assert d["oom_events"][0]["symptom"]


def test_msvcs_bad_allocation_in_an_error_record_is_the_host_running_out():
    d = report("2025-08-14 10:47:21.48 [E:onnxruntime:, sequential_executor.cc:572 onnxruntime::ExecuteKernel] Non-zero "
               "status code returned while running MatMulNBits node. Name:'/lm_head/MatMul_Q4' Status Message: bad "
               "allocation\n")
    assert [(e["kind"], e["backend"]) for e in d["oom_events"]] == [("cpu_allocator", "host")]
    # words about an allocation that was bad are not its failure
    assert report("RuntimeError: a bad allocation strategy was chosen for the cache\n")["oom_events"] == []


@pytest.mark.parametrize("line", [
    "ERROR: Catch exception when loading model: CUDA out of memory. Tried to allocate 260.00 MiB. GPU 0 has a total "
    "capacty of 23.59 GiB of which 81.44 MiB is free. Including non-PyTorch memory, this process has 23.49 GiB memory "
    "in use. Of the allocated memory 23.09 GiB is allocated by PyTorch, and 150.89 MiB is reserved by PyTorch but "
    "unallocated.",
    "(VllmWorkerProcess pid=624293) ERROR 10-15 14:51:47 multiproc_worker_utils.py:226] Exception in worker "
    "VllmWorkerProcess while processing method load_model: CUDA out of memory. Tried to allocate 32.00 MiB. GPU 0 has a "
    "total capacity of 23.68 GiB of which 29.06 MiB is free. Including non-PyTorch memory, this process has 23.64 GiB "
    "memory in use. Of the allocated memory 23.30 GiB is allocated by PyTorch, and 14.78 MiB is reserved by PyTorch but "
    "unallocated.",
])
def test_an_error_that_says_it_was_loading_the_model_places_the_failure(line: str):
    d = report(line + "\n")
    assert d["phase"] == "model_load"
    assert _incidents(d)[0] == "model-load"


def test_a_failure_with_no_load_in_its_words_is_not_placed_at_the_load():
    d = report("ERROR: no error loading model; CUDA out of memory. Tried to allocate 260.00 MiB. GPU 0 has a total "
               "capacity of 23.59 GiB of which 81.44 MiB is free.\n")
    assert d["phase"] != "model_load"


def test_xlas_async_allocator_reports_the_drivers_free_and_total_and_its_own_use():
    d = report("I0000 00:00:1725275976.929061    4655 gpu_device.cc:2022] Created device /job:localhost/replica:0/task:0/"
               "device:GPU:0 with 4225 MB memory:  -> device: 0, name: NVIDIA A30, pci bus id: 0000:ca:00.0\n"
               "2024-09-02 11:20:03.308702: E external/local_xla/xla/stream_executor/gpu/gpu_cudamallocasync_allocator."
               "cc:360] gpu_async_0 cuMemAllocAsync failed to allocate 46137344 bytes: RESOURCE_EXHAUSTED: : "
               "CUDA_ERROR_OUT_OF_MEMORY: out of memory\n"
               " Reported by CUDA: Free memory/Total memory: 1441792/25231032320\n"
               "2024-09-02 11:20:03.308749: E external/local_xla/xla/stream_executor/gpu/gpu_cudamallocasync_allocator."
               "cc:365] Stats: Limit:                      4430626816\n"
               "InUse:                      6036292612\n"
               "MaxInUse:                   6036292612\n")
    [ev] = d["oom_events"]
    assert (ev["kind"], ev["message_format"], ev["device_index"]) == ("xla", "xla-cuda-malloc-async", 0)
    assert (ev["tried_to_allocate_bytes"], ev["free_bytes"], ev["total_capacity_bytes"], ev["reserved_total_bytes"]) == (
        46137344, 1441792, 25231032320, 6036292612)
    # three quarters of the card held by something other than this allocator
    assert _incidents(d)[0] == "stale-gpu-process"


def test_ggmls_cuda_check_names_the_device_and_function():
    d = report("CUDA error: out of memory\n"
               "  current device: 1, in function ggml_cuda_pool_malloc_vmm at /vendor/llama.cpp/ggml-cuda.cu:7812\n"
               "  cuMemCreate(&handle, reserve_size, &prop, 0)\n")
    [ev] = d["oom_events"]
    assert (ev["kind"], ev["device_index"], ev["message_format"]) == ("cuda_runtime_error", 1, "ggml-cuda-check")
    assert "ggml_cuda_pool_malloc_vmm" in ev["detail"]


@pytest.mark.parametrize("line, file", [
    # the library's source after its message (lmdeploy's TurboMind) ...
    ("RuntimeError: [TM][ERROR] CUDA runtime error: out of memory /lmdeploy/src/turbomind/utils/memory_utils.cu:32 ",
     "memory_utils.cu"),
    # ... or before it (Open3D's CUDA check)
    ("RuntimeError: [Open3D Error] (void open3d::core::__OPEN3D_CUDA_CHECK(cudaError_t, const char*, int)) "
     "/root/Open3D/cpp/open3d/core/CUDAUtils.cpp:310: /root/Open3D/cpp/open3d/core/MemoryManagerCUDA.cpp:25 CUDA runtime "
     "error: out of memory", "MemoryManagerCUDA.cpp"),
])
def test_a_librarys_own_cuda_runtime_error_names_its_allocator(line: str, file: str):
    d = report(line + "\n")
    [ev] = d["oom_events"]
    assert (ev["kind"], ev["message_format"]) == ("cuda_runtime_error", "library-allocator")
    assert file in ev["detail"]
    assert _incidents(d)[0] == "non-pytorch-memory"


def test_pytorchs_own_source_before_the_error_is_not_another_library():
    d = report("RuntimeError: /pytorch/c10/cuda/CUDACachingAllocator.cpp:512 CUDA runtime error: out of memory\n")
    assert d["oom_events"][0]["message_format"] != "library-allocator"


def test_an_engine_creating_its_weights_is_loading_the_model():
    d = report("Traceback (most recent call last):\n"
               '  File "/usr/lib/python3.8/threading.py", line 870, in run\n'
               "    self._target(*self._args, **self._kwargs)\n"
               '  File "/site-packages/lmdeploy/turbomind/turbomind.py", line 189, in _create_weight_func\n'
               "    model_comm.create_shared_weights(device_id, rank)\n"
               "RuntimeError: [TM][ERROR] CUDA runtime error: out of memory /lmdeploy/src/turbomind/utils/memory_utils.cu:32\n")
    assert d["phase"] == "model_load"
    assert "model-load" in _incidents(d)[:2]


def test_an_async_allocator_failure_that_is_not_out_of_memory_is_no_oom():
    d = report("gpu_async_0 cuMemAllocAsync failed to allocate 1024 bytes: INTERNAL: : CUDA_ERROR_ILLEGAL_ADDRESS: an "
               "illegal memory access was encountered\n Reported by CUDA: Free memory/Total memory: 20000000000/25231032320\n")
    assert not [e for e in d["oom_events"] if e["kind"] == "xla"]


def test_words_about_a_bad_index_do_not_explain_away_a_later_oom():
    d = report("I previously saw index out of range in self but fixed the vocab.\nRuntimeError: CUDA error: out of memory\n")
    assert d["oom_events"][0]["symptom"] is None and _incidents(d)


def test_a_kernels_launch_check_naming_its_source_is_not_another_librarys_allocator():
    d = report("RuntimeError: /home/u/flash-attention/csrc/flash_attn/src/flash_fwd_launch_template.h:89: CUDA error: out "
               "of memory\n")
    assert d["oom_events"][0]["message_format"] != "library-allocator"


@pytest.mark.parametrize("line", ["Warning: error loading model card, skipping",
                                  "Failed loading weights from cache; downloading"])
def test_a_load_warning_the_job_went_past_is_not_where_it_failed(line: str):
    d = report(line + "\nRuntimeError: CUDA out of memory. Tried to allocate 20.00 MiB (GPU 0; 8.00 GiB total capacity; "
               "7.21 GiB already allocated; 0 bytes free; 7.32 GiB reserved in total by PyTorch)\n")
    assert d["phase"] != "model_load"


@pytest.mark.parametrize("banner", ["Resuming from latest checkpoint: None", "Resuming from checkpoint: false",
                                    "Resuming from checkpoint: False,"])
def test_more_banners_that_say_they_do_not_resume(banner: str):
    d = report(banner + "\nRuntimeError: CUDA out of memory. Tried to allocate 20.00 MiB (GPU 0; 8.00 GiB total "
               "capacity; 7.21 GiB already allocated; 0 bytes free; 7.32 GiB reserved in total by PyTorch)\n")
    assert d["phase"] != "checkpoint_load"


def test_a_policy_synced_into_vllm_each_step_is_not_a_model_load():
    d = report("***** Running training *****\nTraceback (most recent call last):\n"
               '  File "/site-packages/trl/trainer/grpo_trainer.py", line 700, in _move_model_to_vllm\n'
               "    llm_model.load_weights(state_dict.items())\n"
               '  File "/site-packages/vllm/model_executor/models/qwen2.py", line 500, in load_weights\n'
               "    param.data.copy_(loaded_weight)\n"
               "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB. GPU 0 has a total capacity of "
               "79.15 GiB of which 3.00 MiB is free.\n")
    assert d["phase"] != "model_load"


def test_batch_retries_say_the_last_size_and_a_run_that_goes_on_survived_them():
    d = report("OOM Detected, reducing batch/grad size to 24/1.\nOOM Detected, reducing batch/grad size to 12/1.\n"
               "OOM Detected, reducing batch/grad size to 0/1.\n")
    assert sorted((e["message_format"], "to zero" in e["detail"]) for e in d["oom_events"]) == [
        ("batch-size-finder", True), ("batch-size-retry", False)]
    assert "last to 12" in next(e["detail"] for e in d["oom_events"] if e["message_format"] == "batch-size-retry")
    d = report("OOM Detected, reducing batch/grad size to 24/1.\nstep 1 loss=0.5\nstep 2 loss=0.4\n"
               "***** train metrics *****\n  'train_runtime': 100\n")
    assert [e["survived"] for e in d["oom_events"]] == [True]
    assert not [x for x in d["diagnoses"] if not x["warning"]]


@pytest.mark.parametrize("before", [
    "[W:onnxruntime:Default, provider_bridge_ort.cc:1022 Get] Failed to create CUDAExecutionProvider. Please reference "
    "https://onnxruntime.ai/docs/execution-providers/CUDA-ExecutionProvider.html#requirements\n",
    "Available providers: ['TensorrtExecutionProvider', 'CUDAExecutionProvider', 'CPUExecutionProvider']\n"
    "session = ort.InferenceSession(path, providers=['CPUExecutionProvider'])\n",
])
def test_a_gpu_provider_named_but_not_used_leaves_the_arena_off_the_gpu(before: str):
    [ev] = report(before + _ORT)["oom_events"]
    assert ev["kind"] != "device_runtime"


def test_tensorrts_builder_running_out_of_memory_in_its_later_wording():
    d = report("[11/10/2023-06:30:40] [TRT] [E] 2: [virtualMemoryBuffer.cpp::resizePhysical::140] Error Code 2: "
               "OutOfMemory (no further information)\n"
               "[11/10/2023-06:30:40] [TRT] [W] Requested amount of GPU memory (24793579520 bytes) could not be "
               "allocated. There may not be enough free memory for allocation to succeed.\n"
               "[11/10/2023-06:30:40] [TRT-LLM] [E] Engine building failed, please check the error log.\n")
    [ev] = d["oom_events"]
    assert (ev["kind"], ev["message_format"], ev["tried_to_allocate_bytes"]) == ("cuda_runtime_error", "tensorrt",
                                                                                  24793579520)


def test_tensorrt_skipping_a_tactic_that_does_not_fit_is_no_failure():
    d = report("[08/31/2026-07:26:38] [TRT] [I] Local timing cache in use.\n"
               "[08/31/2026-07:26:44] [TRT] [E] [virtualMemoryBuffer.cpp::nvinfer1::StdVirtualMemoryBufferImpl::"
               "resizePhysical::153] Error Code 2: OutOfMemory (Requested size was 1677721600 bytes.)\n"
               "[08/31/2026-07:26:44] [TRT] [W] Requested amount of GPU memory (1677721600 bytes) could not be "
               "allocated. There may not be enough free memory for allocation to succeed.\n")
    assert not [e for e in d["oom_events"] if e["message_format"] == "tensorrt"]


_MODEL_CODE_TB = ("Traceback (most recent call last):\n"
                  '  File "/home/user/proj/classification/models/mamba2/ssd_minimal.py", line 146, in {fn}\n'
                  "    return fn(x, dt, A, B, C, chunk_size)\n"
                  "RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB (GPU 0; 23.69 GiB total capacity; "
                  "20.10 GiB already allocated; 1.20 GiB free; 21.00 GiB reserved in total by PyTorch)\n")


def test_a_cut_traceback_inside_a_models_own_code_is_its_forward_pass():
    assert report(_MODEL_CODE_TB.format(fn="selective_scan_chunk_fn"))["phase"] == "forward"


@pytest.mark.parametrize("fn", ["__init__", "build_backbone", "load_weights", "simple_test", "get_bboxes"])
def test_a_models_code_that_builds_loads_or_predicts_is_no_training_forward(fn: str):
    assert report(_MODEL_CODE_TB.format(fn=fn))["phase"] != "forward"


@pytest.mark.parametrize("text, kind, fmt", [
    ("Failed reason:[f 0926 09:44:26.560704 04 mem_info.cc:197]\n*******************\n"
     "GPU memory is overflow, please reduce your batch_size or data size!\nTotal: 23.65GB Used: 47.36GB\n",
     "device_runtime", "jittor-memory-check"),
    ("CPU memory is overflow, please reduce your batch_size or data size!\nTotal: 62.7GB Used: 70.1GB\n",
     "cpu_allocator", "jittor-memory-check"),
    ("RuntimeError: Malloc for kernel output failed, Memory isn't enough, node:Default/Cast-op446\n",
     "device_runtime", "mindspore-memory-pool"),
    ("RuntimeError: Device(id:0) memory isn't enough and alloc failed, kernel name: Default/MatMul-op12, "
     "alloc size: 1073741824B\n", "device_runtime", "mindspore-memory-pool"),
    ("[ERROR] PRE_ACT(145615,fffbdf67f120,python):2025-01-12-09:48:13.703.514 [mindspore/ccsrc/backend/common/mem_reuse/"
     "mem_dynamic_allocator.cc:392] AddMemBlockAndMemBufByEagerFree] TotalUsedMemStatistics : 24725382656 plus "
     "TotalUsedByEventMemStatistics : 0 and plus alloc size : 100555779072 is more than total mem size : 61079552000.\n",
     "device_runtime", "mindspore-dynamic-allocator"),
    ("Failed to allocate. Freeing memory cache and retrying.\nFailed to allocate again.\n"
     "Error during forward propagation:\n  ConvolutionCudaCudnn\n", "device_runtime", "nnabla-caching-allocator"),
    ("W1215 12:46:31.567991 168330 system_allocator.cc:205] cudaHostAlloc failed.\n"
     "W1215 12:46:31.568040 168330 naive_best_fit_allocator.cc:519] cudaHostAlloc Cannot allocate 122880000 bytes "
     "in CUDAPinnedPlace\n", "cuda_runtime_error", "cuda-driver-host-alloc"),
    ("  temporary_buffer::allocate: get_temporary_buffer failed\n", "cuda_runtime_error", None),
    # cuRAND's and cuSPARSE's allocation failures, as cuBLAS's
    ("CURANDError: CURAND_STATUS_ALLOCATION_FAILED\n", "cublas_alloc", None),
    ("RuntimeError: CUDA error: CUSPARSE_STATUS_ALLOC_FAILED when calling `cusparseCreate(handle)`\n", "cublas_alloc", None),
])
def test_other_frameworks_allocators_running_out(text: str, kind: str, fmt):
    [ev] = report(text)["oom_events"]
    assert (ev["kind"], ev["message_format"]) == (kind, fmt)


def test_jittors_totals_and_mindsporess_size_are_read():
    [ev] = report("GPU memory is overflow, please reduce your batch_size or data size!\n"
                  "Total: 4GB Used: 8.386GB\n")["oom_events"]
    assert (ev["total_capacity_bytes"], ev["backend"]) == (4 * 2**30, "CUDA")
    [ev] = report("RuntimeError: Device(id:0) memory isn't enough and alloc failed, alloc size: 1073741824B\n")["oom_events"]
    assert ev["tried_to_allocate_bytes"] == 1073741824
    [ev] = report("TotalUsedMemStatistics : 24725382656 plus TotalUsedByEventMemStatistics : 0 and plus alloc size : "
                  "100555779072 is more than total mem size : 61079552000.\n")["oom_events"]
    assert (ev["tried_to_allocate_bytes"], ev["total_capacity_bytes"]) == (100555779072, 61079552000)
    # a statistics line of the same allocator that refuses nothing
    assert not report("TotalUsedMemStatistics : 24725382656, total mem size : 61079552000\n")["oom_events"]


@pytest.mark.parametrize("text", [
    # a retry that is not nnabla's allocator's; those frameworks' messages quoted in advice or in
    # a notice of a fallback the job took
    "Failed to allocate again.\n",
    "INFO jittor: if you see GPU memory is overflow, please reduce your batch_size or data size!\n",
    "memory isn't enough, alloc failed for prefetch buffer; continuing without prefetch\n",
    "to avoid 'Executor creation failed due to insufficient GPU memory', lower kv_cache_free_gpu_memory_fraction\n",
    "Tip: if you hit \"CUDA out of memory. Tried to allocate ...\", lower --per_device_train_batch_size.\n",
    "# Known issue: RuntimeError: CUDA out of memory. Tried to allocate <N> MiB\n",
    # the allocator's first words in help text, a setting and counts
    "  --skip_oom            Skip batches that hit CUDA out of memory instead of crashing.\n",
    "recover_from_oom: False   # skip batch on CUDA out of memory\n",
    "Epoch 3 done: loss=0.412, 0 batches skipped due to CUDA out of memory\n",
    "Caught exceptions: 0 (CUDA out of memory: 0)\n",
    "[train] retrying is disabled; CUDA out of memory will raise\n",
    "If you see CUDA out of memory, skipping layers may help\n",
    "To avoid a failed run from CUDA out of memory, lower the batch size\n",
    # the healthy lines of the same libraries: ggml sizing its buffers, Paddle choosing its place
    "llm_load_tensors:      CUDA0 buffer size =  3577.56 MiB\n",
    "ggml_gallocr_reserve_n: reallocating CUDA0 buffer from size 0.00 MiB to 1234.00 MiB\n",
    "place = paddle.CUDAPinnedPlace()  # pinned host memory for the reader\n",
])
def test_words_of_those_allocators_out_of_their_messages_are_no_failure(text: str):
    assert report(text)["oom_events"] == []


_FRAGMENTED_FORWARD = _tb(
    ("train.py", "train_one_epoch", "outputs = model(samples)"),
    ("/env/site-packages/torch/nn/modules/module.py", "_call_impl", "return forward_call(*input, **kwargs)"),
    ("/home/user/proj/models/backbone.py", "forward", "x = self.body(x)"),
    error="RuntimeError: CUDA out of memory. Tried to allocate 88.00 MiB (GPU 0; 6.00 GiB total capacity; 3.76 GiB "
          "already allocated; 0 bytes free; 4.49 GiB reserved in total by PyTorch)")


def test_a_finding_keeps_a_lead_that_more_of_the_evidence_points_to_beside_it():
    ds = report(_FRAGMENTED_FORWARD)["diagnoses"]
    assert ds[0]["incident"] == "alloc-fragmentation" and not ds[0]["warning"]
    [lead] = [d for d in ds if d["incident"] == "activation-memory"]
    assert lead["warning"] and lead["confidence"] <= 0.3


def test_one_weak_prior_is_no_lead_beside_a_finding():
    # the forward pass alone is the logits' weakest sign (no vocabulary, no logits frame)
    assert "large-vocab-logits" not in _incidents(report(_FRAGMENTED_FORWARD))


def test_torchruns_root_cause_table_glued_by_a_paste_still_says_sigkill():
    d = report("torch.distributed.elastic.multiprocessing.errors.ChildFailedError:\n"
               "experiments/train.py FAILED\nFailures:\n<NO OTHER FAILURES>\nRoot Cause (first observed failure) :\n"
               "[0]:\ntime\nhost\n2023-09-14 01:45:50\nnode1\n"
               "rank2 (local rank: 2)exitcode: -9 (pid: 36071)error file: <N/A>\n"
               "traceback : signal 9 (SIGKILL) received by PID 36071\n")
    [ev] = d["oom_events"]
    assert (ev["kind"], ev["ranks"]) == ("host_oom_killer", [2])


@pytest.mark.parametrize("line, killed", [
    ("13117/51576 [======>.......................] - ETA: 10:02:38 - loss: 5.7555 - yolo_layer_3_loss: 3.7015Killed", True),
    ("Epoch 3:  41%|####1     | 410/1000 [02:11<03:09,  3.11it/s, loss=0.412]Killed", True),
    # a word that ends in the letters, and a progress line that names a killed worker in prose
    ("step 120 loss 0.41 - 3.2 it/s - workers restarted: 0 NotKilled", False),
    ("the job was Killed", False),
])
def test_the_shells_killed_glued_to_a_progress_lines_last_figure(line: str, killed: bool):
    kinds = [e["kind"] for e in report(line + "\n")["oom_events"]]
    assert (kinds == ["host_oom_killer"]) is killed


def test_intels_tensorflow_extension_bfc_message_without_an_allocator_name():
    [ev] = report("E itex/core/devices/bfc_allocator.cc:101] Allocator ran out of memory trying to allocate "
                  "10529419660 Bytes (rounded to 10529419776 Bytes)\n")["oom_events"]
    assert ev["tried_to_allocate_bytes"] == 10529419776


@pytest.mark.parametrize("line", [
    "22/11/10 13:59:15 | INFO | root | Failed (CUDA out of memory) on sequence hipAB-900 of length 918.",
    "ERROR: CUDA out of memory, skipping batch 12",
])
def test_a_job_that_caught_the_allocators_error_and_went_on(line: str):
    [ev] = report(line + "\n")["oom_events"]
    assert (ev["kind"], ev["strength"]) == ("cuda_caching_allocator", "likely")


@pytest.mark.parametrize("line, caught", [
    ("ERROR:openfold3.projects.of3_all_atom.runner:OOM for query_id(s) BM50-P19. See logs/predict_err_rank0.log "
     "for details.", True),
    ("[2024-05-01 10:00:00] [ERROR] OOM on rank 3 at step 120", True),
    ("2024-01-01 12:00:00 ERROR trainer: OOM in forward, skipping batch", True),
    # advice, a setting and the kernel's killer are no failed item
    ("ERROR: set max_len to avoid OOM for long sequences", False),
    ("INFO: to avoid OOM for large inputs set --chunk 64", False),
    ("ERROR: OOM killer invoked", False),
    ("OOM for large inputs is expected without --chunk", False),
])
def test_an_error_record_reporting_oom_for_an_item(line: str, caught: bool):
    events = report(line + "\n")["oom_events"]
    assert [(e["kind"], e["backend"], e["strength"]) for e in events] == (
        [("device_runtime", None, "likely")] if caught else [])


def test_the_bfc_allocators_dump_summary_alone_says_an_allocation_failed():
    d = report("2021-03-18 20:49:12.347416: I tensorflow/core/common_runtime/bfc_allocator.cc:1004] "
               "total_region_allocated_bytes_: 55115776 memory_limit_: 55115776 available bytes: 0 "
               "curr_region_allocation_bytes_: 110231552\nStats:\nLimit:                    55115776\n")
    [ev] = d["oom_events"]
    assert ev["message_format"] == "bfc-memory-dump"


def test_tf_datas_iterator_is_the_input_pipeline():
    d = report(_tb(("train.py", "main", "for batch in dataset:"),
                   ("/env/site-packages/tensorflow/python/data/ops/iterator_ops.py", "_next_internal",
                    "output_shapes=self._flat_output_shapes)"),
                   ("/env/site-packages/tensorflow/python/ops/gen_dataset_ops.py", "iterator_get_next",
                    "_ops.raise_from_not_ok_status(e, name)"),
                   error="tensorflow.python.framework.errors_impl.ResourceExhaustedError: OOM when allocating "
                         "tensor with shape[64,512,512,3] and type float on /job:localhost/replica:0/task:0/device:GPU:0"))
    assert d["phase"] == "data_loading"


def test_module_tos_convert_as_the_only_code_line_is_the_model_being_placed():
    d = report("`    return t.to(device, dtype if t.is_floating_point() or t.is_complex() else None, non_blocking)\n"
               "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 12.00 MiB. GPU 0 has a total "
               "capacty of 2.00 GiB of which 0 bytes is free. Of the allocated memory 472.67 MiB is allocated by "
               "PyTorch, and 3.33 MiB is reserved by PyTorch but unallocated.\n")
    assert d["phase"] == "model_load"


@pytest.mark.parametrize("line, kind, dev, n", [
    ("ggml_gallocr_reserve_n: failed to allocate ROCm0 buffer of size 18035509504", "hip", 0, 18035509504),
    ("llama_model_load: failed to allocate CUDA1 buffer of size 4294967296", "cuda_runtime_error", 1, 4294967296),
    ("ggml_gallocr_reserve_n: failed to allocate CPU buffer of size 8589934592", "cpu_allocator", None, 8589934592),
])
def test_ggmls_backend_buffers_that_could_not_be_allocated(line: str, kind: str, dev, n: int):
    [ev] = report(line + "\n")["oom_events"]
    assert (ev["kind"], ev["device_index"], ev["tried_to_allocate_bytes"]) == (kind, dev, n)


def test_ggmls_cuda_backend_says_the_size_and_device_of_its_failed_cudamalloc():
    [ev] = report("ggml_backend_cuda_buffer_type_alloc_buffer: allocating 24289.03 MiB on device 0: cudaMalloc "
                  "failed: out of memory\n")["oom_events"]
    assert (ev["device_index"], ev["tried_to_allocate_bytes"]) == (0, round(24289.03 * 2**20))


def test_a_loads_own_report_of_its_failure_under_the_allocation_error_places_it():
    d = report("ggml_gallocr_reserve_n: failed to allocate ROCm0 buffer of size 18035509504\n"
               "llama_new_context_with_model: failed to allocate compute buffers\n"
               "llama_init_from_gpt_params: error: failed to create context with model 'model.gguf'\n")
    assert d["phase"] == "model_load"
    # (llama.cpp since its rename, and its server)
    d = report("ggml_gallocr_reserve_n: failed to allocate ROCm0 buffer of size 14822711296\n"
               "graph_reserve: failed to allocate compute buffers\n"
               "llama_init_from_model: failed to initialize the context: failed to allocate compute pp buffers\n")
    assert d["phase"] == "model_load"
    d = report("ggml_gallocr_reserve_n: failed to allocate CUDA0 buffer of size 14822711296\n"
               "srv    load_model: failed to load model, 'models/m.gguf'\n")
    assert d["phase"] == "model_load"


def test_ggmls_hip_build_under_cudas_names_is_hip():
    # (its HIP build runs the CUDA backend's code: "cudaMalloc failed", then the buffer of "ROCm0")
    [ev] = report("ggml_backend_cuda_buffer_type_alloc_buffer: allocating 14136.04 MiB on device 0: cudaMalloc failed: "
                  "out of memory\nggml_gallocr_reserve_n: failed to allocate ROCm0 buffer of size 14822711296\n")["oom_events"]
    assert (ev["kind"], ev["backend"], ev["device_index"]) == ("hip", "HIP", 0)


def test_tensorrt_llms_executor_without_memory_for_a_component():
    d = report("[07/08/2025-19:47:15] [TRT-LLM] [RANK 1] [E] Failed to initialize executor on rank 1: Executor "
               "creation failed due to insufficient GPU memory.\n\nThe following component could not be created: "
               "KV cache\nTotal GPU memory (GiB): 140.06\nFree GPU memory before component creation attempt (GiB): "
               "108.86\n")
    [ev] = d["oom_events"]
    assert (ev["total_capacity_bytes"], ev["free_bytes"]) == (round(140.06 * 2**30), round(108.86 * 2**30))
    assert d["phase"] == "model_load"


def test_a_caught_notice_printed_above_the_error_it_caught_is_that_one_failure():
    d = report("WARNING: caught CUDA out of memory in step 11, retrying once\n"
               + _tb(("train.py", "main", "loss = model(x)"), error="torch.OutOfMemoryError: CUDA out of memory. "
                     "Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.15 GiB of which 1.00 GiB is free."))
    assert len(d["oom_events"]) == 1


def test_ggmls_failure_reported_twice_is_one_event_and_its_devices_stay_apart():
    one = report("ggml_backend_cuda_buffer_type_alloc_buffer: allocating 1234.00 MiB on device 0: cudaMalloc failed: "
                 "out of memory\nggml_gallocr_reserve_n: failed to allocate CUDA0 buffer of size 1293942784\n")
    assert len(one["oom_events"]) == 1
    two = report("ggml_backend_cuda_buffer_type_alloc_buffer: allocating 1234.00 MiB on device 0: cudaMalloc failed: "
                 "out of memory\nggml_backend_cuda_buffer_type_alloc_buffer: allocating 1234.00 MiB on device 1: "
                 "cudaMalloc failed: out of memory\n")
    assert sorted(e["device_index"] for e in two["oom_events"]) == [0, 1]


@pytest.mark.parametrize("line, kind, host", [
    ("llama_model_load: failed to allocate CUDA_Host buffer of size 4294967296", "cuda_runtime_error", 4294967296),
    ("ggml_backend_cpu_buffer_type_alloc_buffer: failed to allocate buffer of size 137438953504", "cpu_allocator",
     137438953504),
])
def test_ggmls_host_buffers_are_host_memory(line: str, kind: str, host: int):
    [ev] = report(line + "\n")["oom_events"]
    assert (ev["kind"], ev["host_bytes"], ev["device_index"]) == (kind, host, None)


def test_keras_3s_progress_bar_with_killed_glued_to_it():
    line = "52/625 \u2501\u2501\u2501\u2501\u2501\u2501 2:21 226ms/step - accuracy: 0.1031 - loss: 2.3026Killed\n"
    assert [e["kind"] for e in report(line)["oom_events"]] == ["host_oom_killer"]


@pytest.mark.parametrize("frames", [
    # PyTorch's own nn/modules is no model's code; a builder, an EMA's update, a sampler's step
    [("/env/site-packages/torch/nn/modules/module.py", "state_dict", "destination[prefix + name] = param")],
    [("/home/user/proj/models/resnet.py", "_make_layer", "layers.append(block(self.inplanes, planes))")],
    [("/home/user/proj/models/ema.py", "update", "ema_v.copy_(ema_v * d + (1. - d) * model_v)")],
    [("/home/user/proj/models/diffusion.py", "p_sample", "x = self.denoise(x, t)")],
])
def test_model_code_that_is_no_forward_pass(frames):
    assert report(_tb(*frames))["phase"] != "forward"


def test_a_whole_traceback_into_a_models_code_is_its_forward_pass():
    d = report(_tb(("train.py", "<module>", "main()"), ("train.py", "main", "y = scan(x)"),
                   ("/home/user/proj/models/mamba2/ssd_minimal.py", "selective_scan_chunk_fn", "return fn(x, dt)")))
    assert d["phase"] == "forward"


def test_an_assignment_to_a_name_that_starts_like_model_is_no_model_build():
    d = report(_tb(("infer.py", "run", "model_inputs = build_inputs(batch)"),
                   ("infer.py", "build_inputs", "return {k: v.cuda() for k, v in batch.items()}")))
    assert d["phase"] != "model_load"


@pytest.mark.parametrize("frames", [
    # a DataLoader starting its workers, under multiprocessing's own frames
    [("train.py", "train", "for batch in loader:"),
     ("/env/site-packages/torch/utils/data/dataloader.py", "__iter__", "return self._get_iterator()"),
     ("/env/site-packages/torch/utils/data/dataloader.py", "_get_iterator", "return _MultiProcessingDataLoaderIter(self)"),
     ("/env/site-packages/torch/utils/data/dataloader.py", "__init__", "w.start()"),
     ("/usr/lib/python3.8/multiprocessing/process.py", "start", "self._popen = self._Popen(self)"),
     ("/usr/lib/python3.8/multiprocessing/context.py", "_Popen", "return _default_context.get_context().Process._Popen(process_obj)"),
     ("/usr/lib/python3.8/multiprocessing/context.py", "_Popen", "return Popen(process_obj)"),
     ("/usr/lib/python3.8/multiprocessing/popen_fork.py", "__init__", "self._launch(process_obj)"),
     ("/usr/lib/python3.8/multiprocessing/popen_fork.py", "_launch", "self.pid = os.fork()")],
    # Paddle's loader, and a script's function that builds its loaders
    [("tools/train.py", "main", "train_loader = build_dataloader(config, 'Train', device, logger)"),
     ("/env/site-packages/paddle/fluid/dataloader/dataloader_iter.py", "_init_workers", "worker.start()")],
    [("train.py", "main", "loaders = get_dataloader(args)"),
     ("prepro.py", "get_dataloader", "ids = torch.tensor([f.ids for f in features], dtype=torch.long)")],
])
def test_a_loader_starting_or_being_built_is_data_loading(frames):
    d = report(_tb(*frames, error="OSError: [Errno 12] Cannot allocate memory"))
    assert d["phase"] == "data_loading"


def test_a_quantized_models_device_map_refused_at_load_is_model_load():
    d = report("Loading checkpoint shards: 100%|##########| 2/2 [00:03<00:00,  1.50s/it]\n"
               "ValueError: Some modules are dispatched on the CPU or the disk. Make sure you have enough GPU RAM to "
               "fit the quantized model.\n")
    assert d["phase"] == "model_load"
    assert _incidents(d)[0] == "model-load"
    # the refusal alone says where it was raised: in from_pretrained
    d = report("ValueError: Some modules are dispatched on the CPU or the disk. Make sure you have enough GPU RAM to "
               "fit the quantized model.\n")
    assert d["phase"] == "model_load"


@pytest.mark.parametrize("last, killed", [
    # the kernel's kill line pasted through a CJK input method: full-width brackets and commas,
    # the spaces lost
    ("Out of memory:Killed process 217423\uff08python\uff09total-vm:112518872kB\uff0c  anon-rss:30204444kB\uff0c", True),
    ("Out of memory: Killed process 217423 (python) total-vm:112518872kB, anon-rss:30204444kB, file-rss:0kB", True),
    # the shell's "Killed" glued to a status line the job printed without its newline
    ("(   \u25cf  ) NerfAcc: Setting up CUDA (This may take a few minutes the first time)Killed", True),
    ("Loading data...Killed", True),
    ("Loading data... Killed", True),
    # the word in a status the program printed, an enum's repr
    ("worker 3 state: Killed", False),
    ("Process was Killed", False),
    ("self.handleWorkerKilled", False),
    ("INFO scheduler: trial 3 -> TrialStatus.Killed", False),
    ("job 7 state=JobState.Killed", False),
])
def test_a_kill_in_the_forms_a_paste_gives_it(last, killed):
    d = report("Setting up training dataset...\nCaching all 204 images.\n" + last + "\n")
    assert [e["kind"] for e in d["oom_events"]] == (["host_oom_killer"] if killed else [])
    if killed:
        assert d["oom_events"][0]["evidence"][-1]["text"] == last   # the line as posted


def test_a_device_allocation_call_in_the_runtime_error_is_not_pinned_memory():
    # tiny-cuda-nn's own arena mapping device memory (cuMemCreate), in an encoder's forward
    d = report("    native_ctx, output = native_tcnn_module.fwd(input, params)\n"
               "RuntimeError: /tmp/pip-req-build/include/tiny-cuda-nn/gpu_memory.h:584 cuMemCreate(&m_handles.back(), "
               "n_bytes_to_allocate, &prop, 0) failed: CUDA_ERROR_OUT_OF_MEMORY\n")
    assert d["oom_events"] and "pinned-memory" not in _incidents(d)
    # a host allocation call still is
    d = report("RuntimeError: CUDA error: out of memory\n  cudaHostAlloc(&ptr, size, cudaHostAllocDefault) failed\n")
    assert "pinned-memory" in _incidents(d)


@pytest.mark.parametrize("frame, phase", [
    # DeepSpeed's tools that read a saved ZeRO checkpoint back to convert it
    (("./zero_to_fp32.py", "_get_fp32_state_dict_from_zero_checkpoint", "state_dicts = load(files)"), "checkpoint_load"),
    (("/env/site-packages/deepspeed/checkpoint/ds_to_universal.py", "extract_zero_shards",
      'exp_avg=state_groups[param_group_id]["exp_avg"],'), "checkpoint_load"),
    # DeepSpeed's optimizer itself is the step
    (("/env/site-packages/deepspeed/runtime/zero/stage_1_and_2.py", "step", "self.optimizer.step()"), "optimizer_step"),
])
def test_deepspeeds_checkpoint_conversion_tools_read_a_checkpoint(frame, phase):
    assert report(_tb(frame, error="KeyError: 'exp_avg'"))["phase"] == phase


@pytest.mark.parametrize("text, fmt", [
    # the device map sent weights to the disk: the GPUs' and the host's memory could not hold them
    ("ValueError: The current `device_map` had weights offloaded to the disk. Please provide an `offload_folder` for \n"
     "them. Alternatively, make sure you have `safetensors` installed if the model you are using offers the weights in \n"
     "this format.\n", "disk-device-map"),
    ("ValueError: You are trying to offload the whole model to the disk. Please use the `disk_offload` function "
     "instead.\n", "disk-device-map"),
    ("ValueError: We need an `offload_dir` to dispatch this model according to this `device_map`, the following "
     "submodules need to be offloaded: model.layers.30, model.layers.31.\n", "disk-device-map"),
    # a quantized model's map with modules off the GPU (AWQ's quantizer)
    ("ValueError: You are attempting to load an AWQ model with a device_map that contains a CPU or disk device. This "
     "is not supported. Please remove the CPU or disk device from the device_map.\n", "quantized-device-map"),
    # words about the disk or offloading that are no such refusal (each holds the literals)
    ("INFO: offloading 12 layers to the disk as configured; the current device_map had weights offloaded to the "
     "disk in the last run\n", None),
    ("tip: when the device_map contains a CPU or disk device, set llm_int8_enable_fp32_cpu_offload\n", None),
])
def test_a_device_map_that_sent_weights_to_the_disk(text, fmt):
    d = report(text)
    assert [e["message_format"] for e in d["oom_events"]] == ([fmt] if fmt else [])
    if fmt:
        assert d["oom_events"][0]["strength"] == "likely"   # a map the user wrote may ask for the CPU or disk
        assert d["phase"] == "model_load" and _incidents(d)[0] == "model-load"


@pytest.mark.parametrize("line, kind", [
    # the caching allocator's NVML query failing inside its out-of-memory path (a MIG slice, Jetson)
    ('RuntimeError: NVML_SUCCESS == r INTERNAL ASSERT FAILED at "../c10/cuda/CUDACachingAllocator.cpp":830, please '
     "report a bug to PyTorch.", "cuda_caching_allocator"),
    # NVML's own set-up failures name their call: not this
    ('RuntimeError: NVML_SUCCESS == DriverAPI::get()->nvmlInit_v2_() INTERNAL ASSERT FAILED at '
     '"../c10/cuda/CUDACachingAllocator.cpp":1123, please report a bug to PyTorch.', None),
    # ... nor an assert of the same words elsewhere
    ('RuntimeError: NVML_SUCCESS == r INTERNAL ASSERT FAILED at "../c10/cuda/CUDAFunctions.cpp":120', None),
])
def test_the_allocators_nvml_assert_is_a_likely_out_of_memory(line, kind):
    d = report(line + "\n")
    assert [e["kind"] for e in d["oom_events"]] == ([kind] if kind else [])
    if kind:
        assert d["oom_events"][0]["strength"] == "likely"
        # ... one event for its copies (another rank's, a logger's echo)
        d = report(f"{line}\nwandb: ERROR Run failed: {line}\n[rank1]: {line}\n")
        assert [e["count"] for e in d["oom_events"]] == [3]


@pytest.mark.parametrize("line, kind", [
    # a logger's record whose level is a bracketed field (TensorRT's Python logger)
    ("[06/24/2022-16:29:37] [TRT] [E] 1: Unexpected exception std::bad_alloc", "cpu_allocator"),
    ("[2025-11-25 17:23:11,888] [llm] [ERROR] [logging.py-348] : host memory allocation failed for 8 GiB", "cpu_allocator"),
    # ... at the start of the line, where the normaliser takes the level off with the timestamp
    ("2024-01-01 10:00:00 [ERROR] Could not allocate 1.5 GB on the host", "cpu_allocator"),
    ("[2024-01-01 10:00:00.123] [engine] [error] failed to allocate 8589934592 bytes of GPU memory", "cuda_runtime_error"),
    # a record of another level with the same words is no failure
    ("[06/24/2022-16:29:37] [TRT] [W] 1: Unexpected exception std::bad_alloc", None),
    ("2024-01-01 10:00:00 [INFO] Could not allocate 1.5 GB on the host", None),
])
def test_an_error_record_with_a_bracketed_level(line, kind):
    assert [e["kind"] for e in report(line + "\n")["oom_events"]] == ([kind] if kind else [])


def test_tensorrts_older_words_for_the_request_it_could_not_allocate():
    d = report("[TensorRT] ERROR: Requested amount of memory (150994944 bytes) could not be allocated. There may not "
               "be enough free memory for allocation to succeed.\n"
               "[TensorRT] ERROR: ../builder/cudnnBuilderUtils.cpp (427) - Cuda Error in allocate: 2 (out of memory)\n")
    assert [e["tried_to_allocate_bytes"] for e in d["oom_events"]] == [150994944]


@pytest.mark.parametrize("frames, phase", [
    ([("train.py", "main", "self.test()"), ("train.py", "test", "output = model(batch)"),
      ("/env/site-packages/torch/nn/modules/module.py", "_call_impl", "return forward_call(*args)")], "eval"),
    # what runs under a function of that name decides: a backward pass, an optimizer step, a load
    ([("bench.py", "test", "loss.backward()"),
      ("/env/site-packages/torch/_tensor.py", "backward", "torch.autograd.backward(")], "backward"),
    ([("tent.py", "test", "optimizer.step()"), ("/env/site-packages/torch/optim/adam.py", "step", "adam(")],
     "optimizer_step"),
    ([("test.py", "test", "model = AutoModel.from_pretrained(path)"),
      ("/env/site-packages/transformers/modeling_utils.py", "_load_pretrained_model", "load(state_dict)")],
     "model_load"),
])
def test_a_scripts_own_test_function_is_evaluation(frames, phase):
    assert report(_tb(*frames))["phase"] == phase


def test_a_traceback_pasted_indented_as_a_whole_is_closed_by_its_exception():
    text = ("        Traceback (most recent call last):\n"
            '            File "run.py", line 194, in <module>\n'
            "            exp.test(setting)\n"
            '            File "/home/user/exp/exp_forecasting.py", line 247, in test\n'
            "            preds = preds.reshape(-1, preds.shape[-2], preds.shape[-1])\n"
            "        IndexError: tuple index out of range\n")
    d = report(text)
    assert [f["message"] for f in d["failures"]] == ["IndexError: tuple index out of range"]
    assert not d["oom_events"] and not _incidents(d)


@pytest.mark.parametrize("line, kind", [
    # cuBLAS's ALLOC_FAILED status in its own words, as XLA's stream executor prints it
    ("2024-06-06 10:53:20.251154: E external/local_xla/xla/stream_executor/cuda/cuda_blas.cc:185] failed to create "
     "cublas handle: the resource allocation failed", "cublas_alloc"),
    # ggml's CUDA backend printing cuBLAS's status with its cublasCreate call under it
    ("CUDA error: the resource allocation failed\n  current device: 0, in function ggml_cuda_op_mul_mat_cublas at "
     "ggml-cuda.cu:1234\n  cublasCreate_v2(&g_cublas_handles[id])", "cublas_alloc"),
    # the words in advice about cuBLAS are no failure
    ("tip: cublas errors such as the resource allocation failed mean the device is full", None),
])
def test_cublas_alloc_failed_in_its_own_words(line, kind):
    assert [e["kind"] for e in report(line + "\n")["oom_events"]] == ([kind] if kind else [])


def test_a_learning_rate_schedulers_constructor_is_no_optimizer_step():
    frames = [("train_ms.py", "run", "scheduler_g = torch.optim.lr_scheduler.ExponentialLR("),
              ("/env/site-packages/torch/optim/lr_scheduler.py", "__init__", "super().__init__(optimizer, last_epoch)")]
    d = report(_tb(*frames, error="KeyError: \"param 'initial_lr' is not specified in param_groups[0] when resuming\""))
    assert d["phase"] is None
    # its wrapper around the optimizer's step is the step
    frames = [("train.py", "main", "optimizer.step()"),
              ("/env/site-packages/torch/optim/lr_scheduler.py", "wrapper", "return func(*args, **kwargs)"),
              ("/env/site-packages/apex/optimizers/fused_lamb.py", "step", "multi_tensor_applier(")]
    assert report(_tb(*frames))["phase"] == "optimizer_step"


@pytest.mark.parametrize("text, phase", [
    # a transposed convolution's forward pass runs the op that is a convolution's input gradient
    ("tensorflow.python.framework.errors_impl.ResourceExhaustedError: OOM when allocating tensor with "
     "shape[8,64,256,256] and type float on /job:localhost/replica:0/task:0/device:GPU:0 by allocator GPU_0_bfc "
     "[Op:Conv2DBackpropInput]\n", None),
    ("tensorflow.python.framework.errors_impl.ResourceExhaustedError: OOM when allocating tensor with "
     "shape[3,3,64,64] and type float on /job:localhost/replica:0/task:0/device:GPU:0 by allocator GPU_0_bfc "
     "[Op:Conv2DBackpropFilter]\n", "backward"),
    # Keras names its traced function after the node's lines and their hints
    ("tensorflow.python.framework.errors_impl.ResourceExhaustedError:  OOM when allocating tensor with "
     "shape[32,256,256] and type float on /job:localhost/replica:0/task:0/device:GPU:0 by allocator GPU_0_bfc\n"
     "\t [[node model/conv2d/Conv2D (defined at run.py:20) ]]\n"
     "Hint: If you want to see a list of allocated tensors when OOM happens, add report_tensor_allocations_upon_oom "
     "to RunOptions for current allocation info.\n\n [Op:__inference_predict_function_9480]\n", "eval"),
])
def test_the_op_a_tensorflow_eager_error_names(text, phase):
    assert report(text)["phase"] == phase


@pytest.mark.parametrize("line, dev, host", [
    # CNTK's CUDA_CALL check and ONNX Runtime's, which took it from CNTK: the call after the error
    ("CUDA failure 2: out of memory ; GPU=0 ; hostname=node1 ; expr=cudaMalloc((void**) &deviceBufferPtr, "
     "sizeof(AllocatedElemType) * AsMultipleOf(numElements, 2))", 0, False),
    ("onnxruntime.capi.onnxruntime_pybind11_state.Fail: [ONNXRuntimeError] : 1 : FAIL : CUDA failure 2: out of memory "
     "; GPU=1 ; hostname=node1 ; file=/onnxruntime_src/onnxruntime/core/providers/cuda/cuda_allocator.cc ; line=47 ; "
     "expr=cudaMalloc((void**)&p, size);", 1, False),
    ("CUDA failure 2: out of memory ; GPU=-1 ; hostname=node1 ; expr=cudaMallocHost((void**) &p, n)", None, True),
])
def test_the_cuda_call_check_of_cntk_and_onnx_runtime(line, dev, host):
    d = report(line + "\n")
    [ev] = d["oom_events"]
    assert (ev["kind"], ev["device_index"]) == ("cuda_runtime_error", dev)
    assert (ev["message_format"] == "cuda-driver-host-alloc") is host
    assert d["environment"]["framework"] is None        # CNTK's or ONNX Runtime's words name no PyTorch
    # another CUDA error in the same form is no out-of-memory event
    assert not report("CUDA failure 700: an illegal memory access was encountered ; GPU=0 ; hostname=node1 ; "
                      "expr=cudaMemcpy(dst, src, n, cudaMemcpyDeviceToHost)\n")["oom_events"]


@pytest.mark.parametrize("line", [
    "2020-09-23 13:19:24.277832: W ./tensorflow/core/common_runtime/gpu/gpu_host_allocator.h:44] could not allocate "
    "pinned host memory of size: 415990272",
    "W external/xla/xla/stream_executor/integrations/stream_executor_allocator.cc:66] could not allocate pinned host "
    "of size: 4294967296",
])
def test_the_host_allocators_pinned_memory_warning_alone(line):
    d = report(line + "\n")
    [ev] = d["oom_events"]
    # (the allocator retries smaller and a run may go on: likely, not certain)
    assert (ev["message_format"], ev["strength"]) == ("cuda-driver-host-alloc", "likely")
    assert d["diagnoses"][0]["incident"] == "pinned-memory"
    assert d["environment"]["framework"] != "plain-pytorch"     # TensorFlow's and jaxlib's words


def test_the_host_allocators_retries_at_shrinking_sizes_are_one_event():
    d = report("".join(f"W ./tensorflow/core/common_runtime/gpu/gpu_host_allocator.h:44] could not allocate pinned host "
                       f"memory of size: {n}\n" for n in (415990272, 374391296, 336952320)))
    assert [e["tried_to_allocate_bytes"] for e in d["oom_events"]] == [415990272]


def test_a_pinned_host_allocation_that_succeeded_is_no_event():
    assert not report("I external/xla/xla/stream_executor/integrations/stream_executor_allocator.cc:66] allocated "
                      "pinned host of size: 4294967296\n")["oom_events"]


def test_the_pinned_memory_warning_is_one_event_with_the_drivers_line_before_it():
    d = report("2020-09-23 13:19:24.444287: E tensorflow/stream_executor/cuda/cuda_driver.cc:893] failed to alloc "
               "374391296 bytes on host: CUDA_ERROR_OUT_OF_MEMORY: out of memory\n"
               "2020-09-23 13:19:24.444327: W ./tensorflow/core/common_runtime/gpu/gpu_host_allocator.h:44] could not "
               "allocate pinned host memory of size: 374391296\n")
    assert len(d["oom_events"]) == 1


def test_ray_2_0s_raylet_killing_a_task_on_low_system_memory():
    d = report("(raylet) [2022-09-04 16:20:51,029 E 17085 17125] (raylet) node_manager.cc:2963: System memory low at "
               "node with IP 10.0.0.1. Used memory (6.13GB) / total capacity (6.78GB) (0.904609) exceeds threshold "
               "0.9, killing latest task with name _map_block_nosplit()\n")
    assert [e["kind"] for e in d["oom_events"]] == ["host_oom_killer"]
    assert d["diagnoses"][0]["incident"] == "host-oom"
    # the monitor's report below its threshold kills nothing
    assert not report("(raylet) node_manager.cc:2963: System memory low at node with IP 10.0.0.1. Used memory "
                      "(5.13GB) / total capacity (6.78GB) (0.756637) is below threshold 0.9\n")["oom_events"]


@pytest.mark.parametrize("text", [
    "InternalError (see above for traceback): Dst tensor is not initialized.\n",
    "tensorflow.python.framework.errors_impl.InternalError: 2 root error(s) found.\n"
    "  (0) Internal: Dst tensor is not initialized.\n"
    "  (1) Internal: Dst tensor is not initialized.\n",
    "tensorflow.python.framework.errors_impl.InternalError: Graph execution error:\n\n2 root error(s) found.\n"
    "  (0) INTERNAL:  Dst tensor is not initialized.\n",
])
def test_tensorflows_dst_tensor_error_in_its_tf1_and_multi_error_forms(text):
    assert [e["message_format"] for e in report(text)["oom_events"]] == ["tf-dst-not-initialized"]


def test_tensorflows_dst_tensor_words_quoted_in_advice_are_no_event():
    assert not report('If you see "Dst tensor is not initialized", lower the batch size.\n')["oom_events"]


def test_one_xla_request_refused_on_several_devices_is_an_event_per_device():
    log = "".join(f"E external/xla/xla/pjrt/pjrt_stream_executor_client.cc:2153] Execution of replica 0 failed: "
                  f"RESOURCE_EXHAUSTED: Failed to allocate request for 625.00MiB (655360000B) on device ordinal {d}\n"
                  for d in (7, 1, 7))
    d = report(log)
    assert sorted(e["device_index"] for e in d["oom_events"]) == [1, 7]
    # each device ran out by itself: not ranks sharing one GPU (what follows the unknown cause is a lead)
    assert [g["incident"] for g in d["diagnoses"] if not g["warning"]] == ["unknown-oom"]
    assert "ranks-share-gpu" not in [g["incident"] for g in d["diagnoses"]]


def test_a_cuda_error_string_printed_alone_before_the_faults_that_follow_it():
    # a custom kernel's check prints cudaGetErrorString alone; the op then runs on the buffer it
    # never got: the illegal accesses after it are its consequence, not its cause
    d = report("out of memory\ninvalid argument\n" + "an illegal memory access was encountered\n" * 3)
    [ev] = d["oom_events"]
    assert (ev["kind"], ev["message_format"], ev["symptom"]) == ("cuda_runtime_error", "cuda-error-string", None)
    assert d["diagnoses"][0]["incident"] == "unknown-oom"
    # the same result after the fault is its knock-on: a corrupted context answers every call with
    # its sticky error
    d = report("RuntimeError: CUDA error: an illegal memory access was encountered\n"
               "RuntimeError: CUDA error: out of memory\n")
    assert all(e["symptom"] for e in d["oom_events"]) and d["diagnoses"] == []
    # the two words alone, with nothing of CUDA beside them, are any program's
    assert not report("Step 100\n  out of memory\nretrying with a smaller chunk\n")["oom_events"]


def test_a_cublas_status_fails_after_a_bad_index_whichever_is_printed_first():
    d = report("RuntimeError: CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`\n\n"
               "IndexError: index out of range in self\n")
    assert d["diagnoses"] == []


def _first_knob(d: dict) -> str:
    return min((r for r in d["diagnoses"][0]["remediations"] if r["applicable"]), key=lambda r: r["rank"])["knob"]["framework"]


@pytest.mark.parametrize("prefix, framework", [
    ("external/org_tensorflow/tensorflow/compiler/xla/pjrt/", "jax"),   # jaxlib 0.1-0.4's bundled XLA
    ("external/xla/xla/pjrt/", "jax"),                                   # later jaxlib's
    ("", None),                                                           # XLA's words alone name no one
])
def test_an_xla_error_without_frames_is_not_read_as_pytorch(prefix, framework):
    d = report(f"E {prefix}pjrt_stream_executor_client.cc:2153] Execution of replica 0 failed: RESOURCE_EXHAUSTED: "
               "Failed to allocate request for 625.00MiB (655360000B) on device ordinal 0\n")
    assert d["environment"]["framework"] == framework
    assert _first_knob(d) == "jax"            # PyTorch's CUDA snapshot is no fix for XLA
    # torch_xla's frames around it name PyTorch
    d = report(_tb(("train.py", "main", "xm.optimizer_step(optimizer)"),
                   ("/env/site-packages/torch_xla/core/xla_model.py", "optimizer_step", "mark_step()"),
                   error="RuntimeError: RESOURCE_EXHAUSTED: Failed to allocate request for 625.00MiB (655360000B) "
                         "on device ordinal 0"))
    assert d["environment"]["framework"] == "plain-pytorch"


def test_tensorflows_allocator_error_alone_gets_tensorflows_knobs_first():
    d = report("InternalError (see above for traceback): Dst tensor is not initialized.\n")
    assert d["environment"]["framework"] is None and _first_knob(d) == "tensorflow"


def test_pybind11_could_not_allocate_a_bytes_object_is_host_memory():
    frames = [("train.py", "main", "torch.save(model.state_dict(), path)"),
              ("/env/site-packages/torch/serialization.py", "_save", "zip_file.write_record(name, storage.data_ptr(), num_bytes)")]
    d = report(_tb(*frames, error="RuntimeError: Could not allocate bytes object!"))
    [ev] = d["oom_events"]
    assert (ev["kind"], ev["message_format"]) == ("cpu_allocator", "pybind11-object")
    assert d["diagnoses"][0]["incident"] == "host-oom" and d["phase"] == "checkpoint_save"
    assert report("RuntimeError: Could not allocate string object!\n")["oom_events"]   # its siblings
    # the words quoted inside another error's message are no allocation failure
    assert not report('ValueError: got "Could not allocate bytes object" from the writer\n')["oom_events"]


def test_ranks_that_share_the_gpus_are_read_so_whatever_device_each_error_names():
    procs = " ".join(f"Process {p} has 20.00 GiB memory in use." for p in (101, 102, 103))
    log = "".join(f"[rank{r}]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU {r} has a total "
                  f"capacity of 79.10 GiB of which 30.81 MiB is free. {procs} Including non-PyTorch memory, this process "
                  "has 18.00 GiB memory in use. Of the allocated memory 17.00 GiB is allocated by PyTorch, and 100.00 MiB "
                  "is reserved by PyTorch but unallocated.\n" for r in (0, 1))
    d = report(log)
    assert d["diagnoses"][0]["incident"] == "ranks-share-gpu"
    assert not any("each on its own GPU" in b for b in d["diagnoses"][0]["because"])


@pytest.mark.parametrize("log, framework", [
    # TensorFlow 2.15 and later log their BFC allocator from the XLA tree they bundle
    ("W external/local_xla/xla/tsl/framework/bfc_allocator.cc:291] Allocator (GPU_0_bfc) ran out of memory trying to "
     "allocate 1.00GiB (rounded to 1073741824)requested by op MatMul\n", "tensorflow"),
    # TensorFlow Serving bundles TensorFlow the way jaxlib 0.4 does
    ("I tensorflow_serving/model_servers/server.cc:89] Building single TensorFlow model file config\n"
     "W external/org_tensorflow/tensorflow/core/common_runtime/bfc_allocator.cc:419] Allocator (GPU_0_bfc) ran out "
     "of memory trying to allocate 1.00GiB (rounded to 1073741824)requested by op MatMul\n", "tensorflow"),
    ("W external/org_tensorflow/tensorflow/core/common_runtime/bfc_allocator.cc:419] Allocator (GPU_0_bfc) ran out "
     "of memory trying to allocate 1.00GiB (rounded to 1073741824)requested by op MatMul\n", "jax"),
])
def test_the_framework_of_the_allocator_paths_tensorflow_and_jaxlib_log(log, framework):
    d = report(log)
    assert d["environment"]["framework"] == framework
    assert _first_knob(d) == framework


# -- libraries' frames that say where the job was ------------------------------------------------

@pytest.mark.parametrize("frames,phase", [
    # NVIDIA DALI's pipeline handing over a batch
    ([("main.py", "train", "for i, data in enumerate(train_loader):"),
      ("/env/site-packages/nvidia/dali/plugin/pytorch.py", "__next__", "outputs = self._get_outputs()"),
      ("/env/site-packages/nvidia/dali/pipeline.py", "share_outputs", "return self._pipe.ShareOutputs()")], "data_loading"),
    # tqdm yielding its iterable's next item: the loader's (a loop's body runs in its caller's frame)
    ([("train.py", "train", "for batch in tqdm(loader):"),
      ("/env/site-packages/tqdm/std.py", "__iter__", "for obj in iterable:")], "data_loading"),
    # the DataLoader's pin-memory thread
    ([("/env/site-packages/torch/utils/data/_utils/pin_memory.py", "pin_memory", "return data.pin_memory(device)")],
     "data_loading"),
    # a dataset's item getter, in a dataset package's folder ...
    ([("/app/mmaction/datasets/base.py", "__getitem__", "return self.prepare_train_frames(idx)"),
      ("/app/mmaction/datasets/pipelines/loading.py", "__call__", "container = decord.VideoReader(file_obj)")],
     "data_loading"),
    # ... not a training script that lives in a folder called datasets, nor an environment kept there
    ([("/data/datasets/LLM/swift/cli/sft.py", "<module>", "sft_main()")], None),
    ([("/data/datasets/LLM/swift/swift/trainers/mixin.py", "_prepare_inputs", "inputs = self._prepare(x)")], None),
    ([("train.py", "main", "out = model(x)"),
      ("/datasets/u/venv/lib/python3.10/site-packages/torch/nn/modules/module.py", "__call__", "result = self.forward(x)")],
     "forward"),
    # ... nor tqdm over a generator that runs the model
    ([("train.py", "main", "for out in tqdm(outputs()):"),
      ("/env/site-packages/tqdm/std.py", "__iter__", "for obj in iterable:"),
      ("train.py", "outputs", "yield model(batch)"),
      ("/env/site-packages/torch/nn/modules/module.py", "_call_impl", "return forward_call(*args, **kwargs)"),
      ("/app/models/encoder.py", "forward", "h = self.attn(x)")], "forward"),
    # ... nor a CUDA tensor handed to another process (an RL trainer sharing weights with vLLM)
    ([("/app/ppo_actor.py", "_broadcast_to_vllm", "handle = reduce_tensor(param.data)"),
      ("/env/site-packages/torch/multiprocessing/reductions.py", "reduce_tensor", "storage = tensor._typed_storage()")],
     None),
    # torch.distributed.checkpoint staging a save, and reading one into a model
    ([("/env/site-packages/torch/distributed/checkpoint/_state_dict_stager.py", "deepcopy_with_tensor_offload",
       "y = copy.deepcopy(x)")], "checkpoint_save"),
    ([("train.py", "main", "dcp.load(state, checkpoint_id=path)"),
      ("/env/site-packages/torch/distributed/checkpoint/state_dict_loader.py", "load",
       "_load_state_dict(state_dict, storage_reader=storage_reader)")], "checkpoint_load"),
    # ... not its set_model_state_dict alone, which FSDP2 trainers also load pretrained weights with
    ([("/app/train.py", "main", "set_model_state_dict(model, sd, options=opts)"),
      ("/env/site-packages/torch/distributed/checkpoint/state_dict.py", "set_model_state_dict",
       "return _load_model_state_dict(model, model_state_dict, info)")], None),
    # accelerate offloading the weights it loads to disk
    ([("load.py", "<module>", "model = disk_offload(model, offload_dir)"),
      ("/env/site-packages/accelerate/big_modeling.py", "disk_offload", "offload_state_dict(offload_dir, state)"),
      ("/env/site-packages/accelerate/utils/offload.py", "offload_weight", "array = weight.cpu().numpy()")],
     "model_load"),
    # a function named for the pass among other words; older PyTorch's Module.__call__; DataParallel's replicas
    ([("train.py", "<module>", "loss = engine.train_batch()"),
      ("/env/site-packages/deepspeed/runtime/pipe/engine.py", "_exec_forward_pass", "outputs = super().forward(inputs)")],
     "forward"),
    ([("main.py", "train", "output = model(images)"),
      ("/env/site-packages/torch/nn/modules/module.py", "__call__", "result = self.forward(*input, **kwargs)")], "forward"),
    ([("train.py", "train", "out = model(x)"),
      ("/env/site-packages/torch/nn/parallel/parallel_apply.py", "parallel_apply", "output.reraise()")], "forward"),
    # ... not a hook that prepares the pass by moving weights
    ([("/app/utils/offloading.py", "prepare_block_devices_before_forward", "self.weights_to_device(b, device)")], None),
    # a detector assigning its anchors to boxes by their overlaps (its loss's targets)
    ([("/app/mmdet/core/bbox/assigners/max_iou_assigner.py", "assign", "overlaps = bbox_overlaps(gt_bboxes, bboxes)"),
      ("/app/mmdet/core/bbox/geometry.py", "bbox_overlaps", "lt = torch.max(bboxes1[:, None, :2], bboxes2[:, :2])")],
     "forward"),
    # ... or matching them to the ground truth (detectron2's matcher and anchor labelling)
    ([("/app/detectron2/modeling/proposal_generator/rpn.py", "label_and_sample_anchors",
       "matched_idxs, gt_labels_i = retry_if_cuda_oom(self.anchor_matcher)(match_quality_matrix)"),
      ("/app/detectron2/utils/memory.py", "wrapped", "return func(*args, **kwargs)"),
      ("/app/detectron2/modeling/matcher.py", "__call__", "assert torch.all(match_quality_matrix >= 0)")], "forward"),
    ([("/app/detectron2/structures/boxes.py", "pairwise_iou", "inter = pairwise_intersection(boxes1, boxes2)")], "forward"),
    # a scatter op of a graph layer
    ([("/env/site-packages/torch_scatter/scatter.py", "scatter_max", "return torch.ops.torch_scatter.scatter_max(src)")],
     "forward"),
    # MXNet updating its parameters through its kvstore
    ([("/env/site-packages/mxnet/module/module.py", "update", "_update_params_on_kvstore(self._exec_group.param_arrays)"),
      ("/env/site-packages/mxnet/model.py", "_update_params_on_kvstore", "kvstore.push(name, grad_list)"),
      ("/env/site-packages/mxnet/kvstore.py", "push", "check_call(_LIB.MXKVStorePushEx(")], "optimizer_step"),
    # a model's own layer being constructed; DeepSpeed building an op as the model is set up
    ([("/app/run.py", "<module>", "audio_model = ASTModel(label_dim=50)"),
      ("/app/src/models/ast_models.py", "__init__", "self.v = timm.create_model('vit_base', pretrained=True)")],
     "model_load"),
    ([("/app/train.py", "<module>", "encoding = tcnn.Encoding(3, config)"),
      ("/env/site-packages/tinycudann/modules.py", "__init__", "initial_params = self.native_tcnn_module.initial_params(seed)")],
     "model_load"),
    ([("/env/site-packages/deepspeed/model_implementations/transformers/ds_opt.py", "__init__", "super().__init__(config)"),
      ("/env/site-packages/deepspeed/ops/op_builder/builder.py", "jit_load", "op_module = load(name=self.name)")],
     "model_load"),
    # ... or its layers' buffers allocated as the model is initialised (neon's)
    ([("/srv/neon/neon/models/model.py", "initialize", "self.layers.allocate()"),
      ("/srv/neon/neon/layers/recurrent.py", "allocate", "self.h_ff_buffer = self.be.zeros_like(self.outputs)"),
      ("/srv/neon/neon/backends/nervanagpu.py", "__init__", "self.gpudata = allocator(self.nbytes)")], "model_load"),
    # ... not a helper named like a builder under a forward pass, nor weights loaded into a model
    ([("bench.py", "<module>", "out = model(ids)"),
      ("/env/site-packages/torch/nn/modules/module.py", "_call_impl", "return forward_call(*args, **kwargs)"),
      ("/env/site-packages/transformers/models/llama/modeling_llama.py", "_prepare_decoder_attention_mask",
       "mask = _make_causal_mask(shape, dtype)"),
      ("/env/site-packages/transformers/models/llama/modeling_llama.py", "_make_causal_mask",
       "mask = torch.full((tgt_len, tgt_len), min_value)")], "forward"),
    ([("/app/sync.py", "push", "engine.model._load_weights(params)"),
      ("/app/models/policy.py", "_load_weights", "p.data.copy_(w)")], None),
    # ... but a model's forward, in the same folders, is the forward pass
    ([("/app/train.py", "train", "out = model(x)"), ("/app/src/models/ast_models.py", "forward", "x = self.v(x)")],
     "forward"),
    # an inference engine sizing its KV cache as it starts
    ([("/env/site-packages/vllm/v1/core/kv_cache_utils.py", "get_kv_cache_configs", "_check_enough_kv_cache_memory(cfg)"),
      ("/env/site-packages/vllm/v1/core/kv_cache_utils.py", "_check_enough_kv_cache_memory", "raise ValueError(msg)")],
     "model_load"),
    # a renderer's code, innermost (Gaussian splatting's forward pass)
    ([("train.py", "training", "render_pkg = render(viewpoint_cam, gaussians, pipe, bg)"),
      ("/app/gaussian_renderer/__init__.py", "render", "rendered_image, radii = rasterizer(means3D=means3D)")],
     "forward"),
    # an optimizer creating its state under "with torch.device('cuda')" is the step, not a model load
    ([("train.py", "update_policy", "optimizer.step()"),
      ("/env/site-packages/torch/optim/optimizer.py", "wrapper", "out = func(*args, **kwargs)"),
      ("/app/optimizer.py", "step", 'state["exp_avg"] = torch.zeros_like('),
      ("/env/site-packages/torch/utils/_device.py", "__torch_function__", "return func(*args, **kwargs)")],
     "optimizer_step"),
    # ... and a script whose folder is named like an optimizer's loads its model all the same
    ([("/home/u/llm-optim/train.py", "main", "model = AutoModelForCausalLM.from_pretrained(path)"),
      ("/env/site-packages/transformers/modeling_utils.py", "from_pretrained", "model = cls(config)"),
      ("/env/site-packages/transformers/modeling_utils.py", "_load_pretrained_model", "load(model, sd)")],
     "model_load"),
    # ... while a model built under it is still the model being built
    ([("train.py", "main", "model = Transformer(args)"),
      ("/app/model.py", "__init__", "self.proj = nn.Linear(d, d)"),
      ("/env/site-packages/torch/nn/modules/linear.py", "__init__", "self.weight = Parameter(torch.empty(shape))"),
      ("/env/site-packages/torch/utils/_device.py", "__torch_function__", "return func(*args, **kwargs)")],
     "model_load"),
])
def test_library_frames_name_the_phase(frames, phase):
    assert report(_tb(*frames))["phase"] == phase


_ASSERT = ("../aten/src/ATen/native/cuda/{file}.cu:{no}: {kernel}block: [0,0,0], thread: [7,0,0] "
           "Assertion `{cond}` failed.\n")


@pytest.mark.parametrize("file,kernel,phase", [
    ("Indexing", "indexSelectLargeIndex: ", "forward"),                       # an embedding's lookup
    ("Loss", "nll_loss_forward_reduce_cuda_kernel_2d: ", "forward"),
    ("Loss", "operator(): ", "forward"),                                      # a loss's range check
    ("ClassNLLCriterion", "void cunn_ClassNLLCriterion_updateOutput_kernel(Dtype *, long *) [with Dtype = float]: ",
     "forward"),
    ("ClassNLLCriterion", "void cunn_ClassNLLCriterion_updateGradInput_kernel(Dtype *) [with Dtype = float]: ", "backward"),
    ("IndexKernel", "operator(): ", None),                                    # indexing runs anywhere
])
def test_a_device_side_assertion_names_the_pass_of_its_kernel(file, kernel, phase):
    log = (_ASSERT.format(file=file, no=92, kernel=kernel, cond="t >= 0 && t < n_classes") * 2
           + "terminate called after throwing an instance of 'c10::CUDAError'\n"
           "  what():  CUDA error: device-side assert triggered\n")
    assert report(log)["phase"] == phase


def test_a_kernel_far_above_the_error_or_a_host_death_says_nothing():
    tuned = "I tensorflow/core/kernels/conv_grad_filter_ops.cc:975] running auto-tune for Backward-Filter\n"
    fault = "Memory access fault by GPU node-1 (Agent handle: 0x2e0dbf0) on address 0x6dccc0000.\nAborted (core dumped)\n"
    assert report(tuned + fault)["phase"] == "backward"
    assert report(tuned + "step\n" * 20 + fault)["phase"] is None
    assert report(tuned + "Killed\n")["phase"] is None


def test_an_evaluation_marker_holds_the_kernels_pass():
    log = ("Evaluating\n" + _ASSERT.format(file="Indexing", no=1236, kernel="indexSelectSmallIndex: ", cond="srcIndex < n")
           + "RuntimeError: CUDA error: device-side assert triggered\n")
    assert report(log)["phase"] == "eval"


@pytest.mark.parametrize("tuned,phase", [("Backward-Filter", "backward"), ("Backward-Data", "backward"),
                                         ("Convolve", "forward")])
def test_tensorflows_autotuner_names_the_pass_it_tunes(tuned, phase):
    log = ("Epoch 1/30\n"
           f"2019-01-29 22:25:46.446704: I tensorflow/core/kernels/conv_ops.cc:975] running auto-tune for {tuned}\n"
           "Memory access fault by GPU node-1 (Agent handle: 0x2e0dbf0) on address 0x6dccc0000. Reason: Page not present\n"
           "Aborted (core dumped)\n")
    assert report(log)["phase"] == phase


@pytest.mark.parametrize("code,phase", [
    ("return torch._C._nn.upsample_nearest2d(input, output_size, scale_factors)", "forward"),
    ("self.padding, self.dilation, self.groups)", "forward"),                        # a convolution's call, wrapped
    ("training, momentum, eps, torch.backends.cudnn.enabled", "forward"),            # a batch norm's
    ("native_ctx, output = native_tcnn_module.fwd(input, params)", "forward"),
    ("result = xe_linear.forward_new(x_2d, self.weight.data,", "forward"),
    ("alibi = slopes.unsqueeze(1).unsqueeze(1) * position_point", "forward"),
    ("q_embed = (q * cos) + (rotate_half(q) * sin)", "forward"),
    ("num_rendered, color, depth = _C.rasterize_gaussians(*args)", "forward"),
    ("grads = _C.rasterize_gaussians_backward(*args)", None),
    ("self.prepare_block_devices_before_forward(model)", None),                      # a hook before the pass
    ("self.pre_sub_module_forward_function(module)", None),
    ("for hook in self._forward_pre_hooks.values():", None),
    # ... nor a log line that only holds the word
    ("time (ms) | forward_microstep: 300.1 | backward_microstep: 610.2", None),
    ("Fast-forwarding dataloader past 2000 batches", None),
    ("use_alibi: true", None),
    ("x = a + b", None),
])
def test_the_code_line_above_a_bare_error_names_the_pass(code, phase):
    log = f"    {code}\ntorch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.67 GiB.\n"
    assert report(log)["phase"] == phase


@pytest.mark.parametrize("op,phase", [("mul", "forward"), ("roi_align", "forward"), ("matmul_v2_grad", "backward"),
                                      ("adam", "optimizer_step")])
def test_paddle_names_the_operator_that_could_not_allocate(op, phase):
    """(its pass is the step's; an evaluation the markers name holds it: see below)"""
    log = (f"W0810 11:03:33.292879  7077 operator.cc:242] {op} raises an exception "
           "paddle::memory::allocation::BadAlloc, ResourceExhaustedError: \n\n"
           "Out of memory error on GPU 0. Cannot allocate 165.586182MB memory on GPU 0, 5.866577GB memory has been "
           "allocated and available memory is only 67.812500MB.\n")
    assert report(log)["phase"] == phase


def test_a_cuda_calls_failure_hard_wrapped_mid_word_is_read_across_the_wrap():
    log = ("terminate called after throwing an instance of 'dmlc::Error'\n"
           "  what():  [10:44:35] src/storage/./pooled_storage_manager.h:107: cudaMalloc fail\n"
           "ed: out of memory\n")
    (ev,) = report(log)["oom_events"]
    assert ev["kind"] == "cuda_runtime_error" and ev["evidence"][0]["line"] == 2
    # ... and a wrapped ggml report keeps its size
    (ev,) = report("ggml_cuda_host_malloc: allocating 4096.00 MiB on device 0: cudaMalloc fai\n"
                   "led: out of memory\n")["oom_events"]
    assert ev["tried_to_allocate_bytes"] == 4096 * 2**20
    # ... but two whole lines, a call named on one and another failure on the next, are two messages
    assert report("I0101 allocator.cc:1] using cudaMallocAsync allocator backend\n"
                  "E0101 worker.cc:9] step 12 failed: out of memory\n")["oom_events"] == []


def test_the_cpu_allocators_words_pasted_without_its_name_are_still_its_failure():
    (ev,) = report("`not enough memory: you tried to allocate 20971520 bytes`\n")["oom_events"]
    assert ev["kind"] == "cpu_allocator" and ev["tried_to_allocate_bytes"] == 20971520
    # ... and its hard-wrapped rest under the named line is the same failure, once
    log = ("RuntimeError: [enforce fail at alloc_cpu.cpp:75] err == 0. DefaultCPUAllocator: \n"
           "can't allocate memory: you tried to allocate 132426121216 bytes. Error code 12 (\n")
    (ev,) = report(log)["oom_events"]
    assert ev["count"] == 1 and ev["tried_to_allocate_bytes"] == 132426121216


def test_an_evaluation_marker_holds_paddles_operator():
    log = ("***** Running Evaluation *****\n"
           "W0810 11:03:33.292879  7077 operator.cc:242] matmul_v2 raises an exception "
           "paddle::memory::allocation::BadAlloc, ResourceExhaustedError: \n\n"
           "Out of memory error on GPU 0. Cannot allocate 165.586182MB memory on GPU 0, 5.866577GB memory has been "
           "allocated and available memory is only 67.812500MB.\n")
    assert report(log)["phase"] == "eval"


# -- launchers stopped from outside, retyped messages, OpenCL ---------------------------------------

def test_torchrun_signalled_itself_is_no_silent_rank_death():
    """Older torchrun raises SignalException from its own handler after the SIGTERMs it sent
    its workers: the launcher was stopped (here a hang-up), no rank died silently."""
    log = ("torch.distributed.elastic.multiprocessing.api: [WARNING] Sending process 602271 closing signal SIGTERM\n"
           "Traceback (most recent call last):\n"
           '  File "/env/torch/distributed/elastic/agent/server/api.py", line 877, in _invoke_run\n'
           "    time.sleep(monitor_interval)\n"
           '  File "/env/torch/distributed/elastic/multiprocessing/api.py", line 62, in _terminate_process_handler\n'
           '    raise SignalException(f"Process {os.getpid()} got signal: {sigval}", sigval=sigval)\n'
           "torch.distributed.elastic.multiprocessing.api.SignalException: Process 602146 got signal: 1\n")
    assert report(log)["oom_events"] == []


def test_a_signal_to_torchrun_long_after_its_sigterms_does_not_explain_them():
    log = ("WARNING:torch.distributed.elastic.multiprocessing.api:Sending process 812914 closing signal SIGTERM\n"
           "WARNING:torch.distributed.elastic.multiprocessing.api:Sending process 812915 closing signal SIGTERM\n"
           + "rank1: step 100 loss 2.1\n" * 50
           + "torch.distributed.elastic.multiprocessing.api.SignalException: Process 812900 got signal: 15\n")
    assert "host_oom_killer" in [e["kind"] for e in report(log)["oom_events"]]


def test_sigterms_without_a_signal_to_torchrun_still_suggest_a_silent_death():
    log = ("WARNING:torch.distributed.elastic.multiprocessing.api:Sending process 812914 closing signal SIGTERM\n"
           "WARNING:torch.distributed.elastic.multiprocessing.api:Sending process 812915 closing signal SIGTERM\n")
    assert [e["kind"] for e in report(log)["oom_events"]] == ["host_oom_killer"]


@pytest.mark.parametrize("line,kind", [
    # bash's job report with the colon spaced as it was pasted
    ("./run.sh: line 155 :  1126 Killed   python -m train", "host_oom_killer"),
    # a DataLoader worker's death retyped with its case and spaces lost
    ("RuntimeError:Dataloader worker (pid 6479) is killed by signal:killed", "dataloader_killed"),
    ("RuntimeError: dataloader worker (pid(s) 6479) exited unexpectedly", "dataloader_killed"),
    # OpenCL's allocation failure, from pyopencl and from C
    ("pyopencl._cl.MemoryError: clEnqueueMapBuffer failed: MEM_OBJECT_ALLOCATION_FAILURE", "device_runtime"),
    ("clCreateBuffer returned CL_MEM_OBJECT_ALLOCATION_FAILURE", "device_runtime"),
])
def test_retyped_and_other_runtime_failures_are_read(line, kind):
    assert kind in [e["kind"] for e in report(line + "\n")["oom_events"]]


@pytest.mark.parametrize("line", [
    # another signal in the same forms: stopped, not killed for memory
    "./run.sh: line 155 :  1126 Terminated   python -m train",
    "RuntimeError: Dataloader worker (pid 6479) is killed by signal: Terminated.",
    # an OpenCL status name inside a longer identifier
    "registered CL_MEM_OBJECT_ALLOCATION_FAILURE_HANDLER for retries",
])
def test_their_neighbours_are_not_failures(line):
    assert report(line + "\n")["oom_events"] == []


def test_a_trainer_setting_up_its_dataset_when_it_is_killed_is_loading_data():
    d = report("Setting up training dataset...\nCaching all 373 images.\nKilled\n")
    assert d["phase"] == "data_loading"
    # an evaluation's set, or a set-up the line says is done, is no training data being loaded
    assert report("Setting up the validation dataset\nKilled\n")["phase"] != "data_loading"
    assert report("Setting up training dataset... done\nKilled\n")["phase"] != "data_loading"


def test_a_scripts_own_wrapper_around_the_save_is_saving():
    d = report('Traceback (most recent call last):\n'
               '  File "/llm/FastChat/fastchat/train/train.py", line 269, in train\n'
               '    safe_save_model_for_hf_trainer(trainer=trainer, output_dir=training_args.output_dir)\n'
               '  File "/llm/FastChat/fastchat/train/train.py", line 73, in safe_save_model_for_hf_trainer\n'
               '    cpu_state_dict = {key: value.cpu() for key, value in state_dict.items()}\n'
               'torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 500.00 MiB.\n')
    assert d["phase"] == "checkpoint_save"
    # a function that trains and then saves is no save while its forward pass runs
    d = report('Traceback (most recent call last):\n'
               '  File "/work/run.py", line 20, in train_and_save_model\n'
               '    trainer.train()\n'
               '  File "/work/trainer.py", line 80, in train\n'
               '    out = model(batch)\n'
               '  File "/work/model.py", line 30, in forward\n'
               '    h = self.attn(x)\n'
               'torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 500.00 MiB.\n')
    assert d["phase"] == "forward"


def test_a_pipeline_placed_on_the_device_is_the_model_being_loaded():
    d = report('Traceback (most recent call last):\n'
               '  File "/work/demo.py", line 9, in <module>\n'
               '    pipe.to(device)\n'
               'torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB. GPU 0 has a total capacity '
               'of 23.59 GiB of which 2.06 MiB is free.\n')
    assert d["phase"] == "model_load"
    # a pipeline's outputs moved to the device are tensors, not models
    d = report('Traceback (most recent call last):\n'
               '  File "/work/demo.py", line 9, in <module>\n'
               '    pipe_out = pipe_outputs.to(device)\n'
               'torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB.\n')
    assert d["phase"] != "model_load"


def test_a_debuggers_report_lists_its_frames_innermost_first():
    # VS Code's debugger: the exception, its message, then the frames from the innermost out
    # (synthetic, in the shape of its reports)
    d = report('Exception has occurred: OutOfMemoryError\n'
               'CUDA out of memory. Tried to allocate 20.00 MiB. GPU 0 has a total capacity of 23.59 GiB of which '
               '2.06 MiB is free.\n'
               '  File "/home/user/proj/hubconf.py", line 129, in load_pipeline\n'
               '    pipe.to(device)\n'
               '  File "/home/user/proj/train.py", line 40, in train\n'
               '    logits = model(batch)\n'
               '  File "/home/user/proj/train.py", line 9, in <module>\n'
               '    train()\n')
    assert d["phase"] == "model_load"
    assert [f["function"] for f in d["frames"]] == ["<module>", "train", "load_pipeline"]


def test_abseils_report_of_a_bus_error_in_rays_object_store_is_shared_memory():
    d = report("(raylet) *** SIGBUS received at time=1749878572 on cpu 166 ***\n"
               "(raylet) PC: @     0x7f65bf115c61  (unknown)  (unknown)\n"
               "(raylet)     @     0x56423c3996c4       1200  ray::ObjectManager::ReceiveObjectChunk()\n")
    assert d["diagnoses"][0]["incident"] == "shm-exhausted"
    # another signal in the same handler's words is no bus error
    d = report("(raylet) *** SIGSEGV received at time=1749878572 on cpu 166 ***\n")
    assert not d["diagnoses"] or d["diagnoses"][0]["incident"] != "shm-exhausted"


def test_a_cuda_check_printing_the_errors_string_before_the_call_on_the_next_line():
    d = report("CUDA Runtime Error at: /home/user/cuTAGI/src/data_struct_cuda.cu:83\n"
               "out of memory cudaMalloc(&this->d_jcb, size * sizeof(float))\n")
    [ev] = d["oom_events"]
    assert (ev["kind"], ev["detail"]) == ("cuda_runtime_error", "cudaMalloc failed: out of memory")
    # the same words with no failure above them, or no call after them, are no CUDA failure
    assert not report("All good so far\nout of memory cudaMalloc(&p, n)\n")["oom_events"]
    assert not [e for e in report("CUDA Runtime Error at: /src/x.cu:83\nout of memory, retrying\n")["oom_events"]
                if e["detail"] == "cudaMalloc failed: out of memory"]


_PAGING = "OSError: [WinError 1455] The paging file is too small for this operation to complete."


@pytest.mark.parametrize("prefix", ["D:\\Anaconda\\envs\\yolo\\Lib\\", "C:/Python311/Lib/"])
def test_a_windows_child_process_failing_as_it_starts_is_loading_data(prefix):
    # spawn's child re-running the main script, which imports torch again: on Windows, a
    # DataLoader worker starting
    frames = [("<string>", "<module>", "from multiprocessing.spawn import spawn_main; spawn_main(parent_pid=1)"),
              (prefix + "multiprocessing\\spawn.py", "spawn_main", "exitcode = _main(fd, parent_sentinel)"),
              (prefix + "multiprocessing\\spawn.py", "_main", "prepare(preparation_data)"),
              (prefix + "multiprocessing\\spawn.py", "prepare", "_fixup_main_from_path(data['init_main_from_path'])"),
              (prefix + "multiprocessing\\spawn.py", "_fixup_main_from_path", "main_content = runpy.run_path(main_path,"),
              ("E:\\yolov5\\train.py", "<module>", "import torch"),
              (prefix + "site-packages\\torch\\__init__.py", "<module>", "raise err")]
    assert report(_tb(*frames, error=_PAGING))["phase"] == "data_loading"


def test_a_child_process_elsewhere_or_running_its_target_is_not_read_as_starting():
    start = [("<string>", "<module>", "from multiprocessing.spawn import spawn_main; spawn_main(parent_pid=1)")]
    # Linux's spawned children are as often a launcher's ranks (torch.multiprocessing.spawn)
    linux = start + [("/usr/lib/python3.10/multiprocessing/spawn.py", "spawn_main", "exitcode = _main(fd, parent_sentinel)"),
                     ("/usr/lib/python3.10/multiprocessing/spawn.py", "_main", "prepare(preparation_data)"),
                     ("/home/user/train.py", "<module>", "import torch")]
    assert report(_tb(*linux, error="MemoryError"))["phase"] != "data_loading"
    # a Windows child that has started runs its target: that target's frames say the phase
    running = start + [("C:\\Python\\lib\\multiprocessing\\spawn.py", "spawn_main", "exitcode = _main(fd, parent_sentinel)"),
                       ("C:\\Python\\lib\\multiprocessing\\spawn.py", "_main", "return self._bootstrap(parent_sentinel)"),
                       ("C:\\Python\\lib\\multiprocessing\\process.py", "_bootstrap", "self.run()"),
                       ("C:\\Python\\lib\\multiprocessing\\process.py", "run", "self._target(*self._args, **self._kwargs)"),
                       ("C:\\work\\render.py", "draw_frames", "canvas = np.zeros((n, h, w, 3))")]
    assert report(_tb(*running, error="MemoryError"))["phase"] != "data_loading"


def _xpu_oom(request: str, allocated: str, backend: str = "XPU") -> str:
    return (f"torch.OutOfMemoryError: {backend} out of memory. Tried to allocate {request}. GPU 0 has a total capacity of "
            f"15.11 GiB. Of the allocated memory {allocated} is allocated by PyTorch, and 0 bytes is reserved by PyTorch "
            "but unallocated. Please use `empty_cache` to release all unoccupied cached memory.\n")


def test_an_xpu_request_over_its_single_allocation_limit_on_an_empty_device_is_that_limit():
    (ev,) = report(_xpu_oom("8.00 GiB", "0 bytes"))["oom_events"]
    assert "single allocation" in ev["symptom"]
    assert report(_xpu_oom("8.00 GiB", "0 bytes"))["diagnoses"] == []
    # memory in use, a request under the limit, or another backend: memory, as read before
    for text in (_xpu_oom("8.00 GiB", "6.00 GiB"), _xpu_oom("2.00 GiB", "0 bytes"), _xpu_oom("8.00 GiB", "0 bytes", "CUDA")):
        assert report(text)["oom_events"][0]["symptom"] is None, text


def test_paddles_first_gpu_chunk_refused_is_a_device_oom_with_its_figures():
    d = report("paddle.fluid.core.EnforceNotMet: enforce allocating <= available failed, 1829703254 > 1604058880\n"
               " at [/paddle/paddle/fluid/platform/gpu_info.cc:118]\n")
    (ev,) = d["oom_events"]
    assert (ev["kind"], ev["message_format"]) == ("cuda_runtime_error", "paddle-gpu-chunk")
    assert (ev["tried_to_allocate_bytes"], ev["free_bytes"]) == (1829703254, 1604058880)
    # another enforcement that failed is no memory
    assert report("paddle.fluid.core.EnforceNotMet: enforce x_dims.size() <= 6 failed, 7 > 6\n")["oom_events"] == []


def test_rmms_out_of_memory_cut_before_its_runtime_error_is_a_device_oom():
    d = report("MemoryError: std::bad_alloc: out_of_memory: CUDA error at: "
               "/home/user/miniforge3/envs/rapids/include/rmm/mr/device/cuda_memory_resource.hpp\n")
    assert [e["kind"] for e in d["oom_events"]] == ["cuda_runtime_error"]
    # RMM's other failures are not this one
    assert report("RuntimeError: RMM failure at: /rmm/mr/device/cuda_memory_resource.hpp:53: "
                  "invalid argument\n")["oom_events"] == []


def test_torch7s_failed_reallocation_is_a_host_oom():
    d = report("THNN.lua:109: $ Torch: not enough memory: you tried to reallocate 11GB. Buy new RAM! at "
               "/tmp/luarocks_torch-scm-1-2936/torch7/lib/TH/THGeneral.c:251\n")
    (ev,) = d["oom_events"]
    assert (ev["kind"], ev["host_bytes"]) == ("cpu_allocator", 11 * 2**30)


@pytest.mark.parametrize("line, kill", [
    ("RuntimeError: neuronx-cc failed with -9", True),
    ("RuntimeError: neuronx-cc failed with -6", False),
    ("RuntimeError: neuronx-cc failed with status 1", False),
    # an errno, a count or a figure after the words is no child's status
    ("io_uring_submit failed with -9 (EBADF)", False),
    ("WARNING: allreduce failed with -9 retries left", False),
    ("Validation failed with -9.5 dB SNR", False),
])
def test_a_tool_that_reports_its_childs_status_bare(line, kill):
    d = report(line + "\n")
    assert bool([e for e in d["oom_events"] if e["kind"] == "host_oom_killer"]) == kill


_CAFFE = ("F0209 17:15:06.000000 30298 syncedmem.cpp:56] Check failed: error == cudaSuccess (2 vs. 0)  out of memory\n"
          "*** Check failure stack trace: ***\n"
          "    @     0x7f6b5afcfcb2  google::LogMessage::Flush()\n"
          "    @           0x4be592  caffe::SyncedMemory::mutable_gpu_data()\n")


@pytest.mark.parametrize("frames, phase", [
    (["caffe::ConvolutionLayer<>::Backward_gpu()", "caffe::Net<>::BackwardFromTo()", "caffe::Solver<>::Solve()"], "backward"),
    (["caffe::ConvolutionLayer<>::Forward_gpu()", "caffe::Net<>::ForwardFromTo()", "caffe::Solver<>::Step()"], "forward"),
    # the solver's test pass, wherever in the stack: evaluation
    (["caffe::CuDNNConvolutionLayer<>::Forward_gpu()", "caffe::Net<>::Forward()", "caffe::Solver<>::Test()",
      "caffe::Solver<>::TestAll()"], "eval"),
    # a stack that names no pass; Caffe's ForwardBackward is the whole step, no pass of its own
    (["caffe::Blob<>::Reshape()", "main"], None),
    (["caffe::SyncedMemory::to_gpu()", "caffe::Net<>::ForwardBackward()", "caffe::Solver<>::Step()"], None),
])
def test_phase_from_the_native_stack_under_a_failed_check(frames, phase):
    text = _CAFFE + "".join(f"    @           0x48825f  {f}\n" for f in frames)
    assert report(text)["phase"] == phase


def test_phase_from_a_caffe2_gradient_operator_in_c10s_frames():
    text = ("[enforce fail at context_gpu.cu:524] error == cudaSuccess. 2 vs 0. Error at: context_gpu.cu:524: out of memory\n"
            "frame #0: c10::ThrowEnforceNotMet(char const*, int, char const*) + 0x67 (0x7f65c798aee7 in libc10.so)\n"
            "frame #3: caffe2::UpsampleNearestGradientOp<float, caffe2::CUDAContext>::RunOnDevice() + 0x2b5 "
            "(0x7f64fb2e0a65 in libcaffe2_detectron_ops_gpu.so)\n")
    assert report(text)["phase"] == "backward"


def test_a_packages_inference_module_is_evaluation():
    tb = _tb(("/env/site-packages/nnunetv2/inference/predict_from_raw_data.py", "predict_sliding_window_return_logits",
              "predicted_logits = self._internal_predict_sliding_window_return_logits(data, slicers,"),
             ("/env/site-packages/nnunetv2/inference/predict_from_raw_data.py", "_internal_predict_sliding_window_return_logits",
              "prediction = self._internal_maybe_mirror_and_predict(workon)"))
    assert report(tb)["phase"] == "eval"
    # ... not a training script's own folder of that name
    assert report(_tb(("/src/inference/train.py", "train", "loss = compute(batch)"),
                      ("/src/inference/utils.py", "compute", "return torch.stack(xs)")))["phase"] is None


def test_xgboosts_figures_under_its_allocation_error():
    d = report("xgboost.core.XGBoostError: [13:55:26] /workspace/xgboost/src/common/device_helpers.cuh:414: Memory "
               "allocation error on worker 0: std::bad_alloc: cudaErrorMemoryAllocation: out of memory\n"
               "- Free memory: 11310923776\n- Requested memory: 47996\n")
    (ev,) = d["oom_events"]
    assert (ev["tried_to_allocate_bytes"], ev["free_bytes"]) == (47996, 11310923776)
    # the same figures under another error are not its
    d = report("RuntimeError: CUDA error: out of memory\n- Free memory: 11310923776\n- Requested memory: 47996\n")
    assert d["oom_events"][0]["tried_to_allocate_bytes"] is None


def test_tensorrts_request_inside_its_error():
    d = report("[08/11/2024-06:10:36] [TRT] [E] [globWriter.cpp::makeResizableGpuMemory::435] Error Code 2: OutOfMemory "
               "(Requested size was 16654532608 bytes.)\n"
               "[08/11/2024-06:10:36] [TRT] [E] 4: [builder.cpp::buildSerializedNetwork::751] Error Code 4: Internal "
               "Error (Engine build failed)\n")
    assert [e["tried_to_allocate_bytes"] for e in d["oom_events"]] == [16654532608]


def test_julias_cuda_pool_failure_with_its_figures():
    d = report("ERROR: Out of GPU memory trying to allocate 146.250 MiB\n"
               "Effective GPU memory usage: 99.50% (3.792 GiB/3.810 GiB)\n"
               "Memory pool usage: 960.548 MiB (2.688 GiB reserved)\n"
               "Stacktrace:\n")
    (ev,) = d["oom_events"]
    assert (ev["kind"], ev["message_format"]) == ("device_runtime", "cuda-jl-pool")
    assert ev["tried_to_allocate_bytes"] == int(146.25 * 2**20)
    assert abs(ev["total_capacity_bytes"] - 3.81 * 2**30) < 2 and abs(ev["reserved_total_bytes"] - 2.688 * 2**30) < 2
    assert abs(ev["free_bytes"] - (3.81 - 3.792) * 2**30) < 2
    # its figures alone, without the error line above them, are no failure
    assert report("Effective GPU memory usage: 99.50% (3.792 GiB/3.810 GiB)\n"
                  "Memory pool usage: 960.548 MiB (2.688 GiB reserved)\n")["oom_events"] == []


@pytest.mark.parametrize("line, found", [
    # a bare level word the normaliser takes off is an error record, as a bracketed one is
    ("ERROR: could not allocate 2147483648 bytes of GPU memory", True),
    ("FATAL: failed to allocate device memory for the cache", True),
    # ... Python logging's default record, and a level after a timestamp, bracketed or not
    ("ERROR:root:could not allocate 2147483648 bytes of GPU memory", True),
    ("[2024-01-01 10:00:00] ERROR: could not allocate 2147483648 bytes of GPU memory", True),
    ("2024-01-01 10:00:00 INFO: could not allocate 2147483648 bytes of GPU memory", False),
    # ... not a warning's
    ("WARNING: could not allocate 2147483648 bytes of GPU memory", False),
])
def test_a_memory_failure_under_a_bare_level_word(line, found):
    assert bool(report(line + "\n")["oom_events"]) == found


def test_an_xla_runtimes_allocation_failure_in_words_is_xlas_kind():
    (ev,) = report("jaxlib.xla_extension.XlaRuntimeError: INTERNAL: Failed to allocate 98697216 bytes for new "
                   "constant\n")["oom_events"]
    assert (ev["kind"], ev["backend"]) == ("xla", "XLA")


def test_ipythons_header_names_a_memory_error_whose_message_the_paste_lacks():
    tb = ("---------------------------------------------------------------------------\n"
          "MemoryError                               Traceback (most recent call last)\n"
          "<ipython-input-6-416281258c80> in <module>\n")
    (ev,) = report(tb)["oom_events"]
    assert ev["kind"] == "cpu_allocator" and ev["line"] == 2
    # with its message line below: one event, the message's
    (ev,) = report(tb + "MemoryError: Unable to allocate 1.00 GiB for an array with shape (1024, 1024, 256) and "
                        "data type float32\n")["oom_events"]
    assert ev["line"] == 4
    # another exception's header is no memory error
    assert report(tb.replace("MemoryError", "ValueError   "))["oom_events"] == []


@pytest.mark.parametrize("line, found", [
    # a logger whose level column is an error's, padded or set off from the message
    ("10/08/2019 22:53:01 MainProcess     MainThread      cli             execute_script            ERROR    "
     "You do not have enough GPU memory available to train the selected model at the selected settings.", True),
    ("2024-01-01 10:00:00,000 - trainer - ERROR - not enough GPU memory to fit the batch", True),
    # ... not an info record's, nor the word inside a sentence
    ("10/08/2019 22:53:01 MainProcess     MainThread      cli             execute_script            INFO     "
     "You do not have enough GPU memory available to train the selected model at the selected settings.", False),
    ("the ERROR count was low; we did not have enough GPU memory for a second run", False),
])
def test_a_memory_failure_under_a_loggers_error_level_column(line, found):
    assert bool(report(line + "\n")["oom_events"]) == found


def test_tensorflows_backpedalling_retries_are_one_refusal():
    lines = [f"2021-07-24 11:06:12.45070{k}: I tensorflow/stream_executor/cuda/cuda_driver.cc:745] failed to allocate "
             f"{m} ({n} bytes) from device: CUDA_ERROR_OUT_OF_MEMORY: out of memory"
             for k, (m, n) in enumerate([("335.92M", 352241408), ("302.33M", 317017344), ("272.10M", 285315840)])]
    (ev,) = report("\n".join(lines) + "\n")["oom_events"]
    assert (ev["tried_to_allocate_bytes"], ev["count"]) == (352241408, 3)
    # two refusals of unrelated sizes are two
    assert len(report(lines[0] + "\n" + lines[0].replace("335.92M (352241408", "1.00G (1073741824") + "\n")
               ["oom_events"]) == 2


_COLAB_HEAD = "Launching Web UI with arguments: --share\nLoading weights [06c50424] from /content/models/model.ckpt\n"


@pytest.mark.parametrize("log, killed", [
    # a notebook (Colab) stopping a command that exhausted its RAM: the interrupt's echo ends the
    # output, with no KeyboardInterrupt from Python
    (_COLAB_HEAD + "^C\n", True),
    (_COLAB_HEAD + '^C"\n', True),
    # ... not a user's interrupt that Python answered or a launcher passed on, nor one after a
    # failure already printed
    (_COLAB_HEAD + "Traceback (most recent call last):\n  File \"x.py\", line 3, in <module>\nKeyboardInterrupt\n^C\n",
     False),
    (_COLAB_HEAD + "torch.distributed.elastic.multiprocessing.api:Received Signals.SIGINT death signal\n^C\n", False),
    (_COLAB_HEAD + "ValueError: bad shape\n^C\n", False),
    # ... nor the characters inside a line, nor an echo the log goes on after
    (_COLAB_HEAD + "press ^C to stop\n", False),
    (_COLAB_HEAD + "^C\nstep 2 loss 0.3\n", False),
    # ... nor a terminal's log, where the echo ends a hang someone stopped (a tail -f, a job waiting)
    ("step 1 loss 0.3\n^C\n", False),
    # ... nor a notebook's command that runs no model (a download), nor one that said how to stop it
    ("!wget https://x.org/data.zip\nSaving to: '/content/data.zip'\n 45%[===>      ] 1.2G\n^C\n", False),
    (_COLAB_HEAD + " * Running on http://127.0.0.1:7860 (Press CTRL+C to quit)\n^C\n", False),
])
def test_a_notebook_command_that_stops_at_an_interrupts_echo_is_a_weak_kill(log, killed):
    r = report(log)
    kinds = [(e["kind"], e["strength"], e["message_format"]) for e in r["oom_events"]]
    assert kinds == ([("host_oom_killer", "weak", "interrupt-echo")] if killed else [])
    if killed:
        assert r["diagnoses"][0]["incident"] == "host-oom" and r["phase"] == "model_load"


@pytest.mark.parametrize("text, phase", [
    # a weight file read by name, and latent-diffusion code building its model, just above a kill
    ("Loading weights [06c50424] from /content/models/model.ckpt\n", "model_load"),
    # ... not a load that said it was done before the job went on, below it or on its line
    ("Loading weights from /darknet/darknet53.conv.74...\n seen 64\nDone!\nLearning Rate: 0.001\nResizing\n", None),
    ("Loading weights from darknet53.conv.74...Done!\nLearning Rate: 0.001, Momentum: 0.9\nResizing\n", None),
    ("Loading weights from yolov4.conv.137...\nDone! Loaded 137 layers from weights-file\nResizing\n", None),
    ("Building model...\n...Done.\nTraining model...\n", None),
    # ... nor a resume's checkpoint, nor the words inside another message
    ("Loading weights from /runs/checkpoint-500/last.ckpt\n", None),
])
def test_a_load_marker_is_where_a_killed_job_was_unless_it_finished(text, phase):
    assert report(text + "Killed\n")["phase"] == phase


def test_cupys_message_cut_by_a_console_that_wraps_it():
    r = report("\u26a0 Aborting and saving the final best model. Encountered exception:\n"
               "OutOfMemoryError('Out of memory allocating 3,327,510,528 bytes (allocated so\n"
               "far: 13,736,083,968 bytes).',)\n")
    (ev,) = r["oom_events"]
    assert (ev["message_format"], ev["tried_to_allocate_bytes"], ev["reserved_total_bytes"]) == \
        ("cupy-memory-pool", 3327510528, 13736083968)
    # the whole message on one line reads the same; a number without CuPy's grouping is no message
    one = report("cupy.cuda.memory.OutOfMemoryError: Out of memory allocating 3,327,510,528 bytes "
                 "(allocated so far: 13,736,083,968 bytes).\n")["oom_events"][0]
    assert (one["tried_to_allocate_bytes"], one["reserved_total_bytes"]) == (3327510528, 13736083968)
    assert report("note: Out of memory allocating 3327510528 bytes is what it logs\n")["oom_events"] == []
    # ... nor another allocator's words without the pool's figure
    assert report("xmalloc: Out of memory allocating 512 bytes\n")["oom_events"] == []
    assert report("note: Out of memory allocating 3,327,510,528 bytes is what it logs\n")["oom_events"] == []


def test_rays_memory_error_raised_by_a_task_is_a_host_kill_when_its_message_is_cut():
    r = report("ray.exceptions.RayTaskError(RayOutOfMemoryError): ray::IMPALA.train() (pid=19168, ip=10.0.0.1)\n"
               '  File "python/ray/_raylet.pyx", line 452, in ray._raylet.execute_task\n')
    assert [(e["kind"], e["message_format"]) for e in r["oom_events"]] == [("host_oom_killer", "ray-memory-monitor")]
    assert r["diagnoses"][0]["incident"] == "host-oom"
    # another error a task raised is not, nor a question that names the error
    assert report("ray.exceptions.RayTaskError(ValueError): ray::IMPALA.train() (pid=19168, ip=10.0.0.1)\n")[
        "oom_events"] == []
    assert report("How do I fix RayTaskError(RayOutOfMemoryError) when training?\n")["oom_events"] == []


def test_the_cuda_malloc_async_table_kept_in_an_escaped_string():
    line = ("thread 'main' panicked at 'Unable to warmup model: Generation(\"Allocation on device 0 would exceed allowed "
            "memory. (out of memory)\\nCurrently allocated     : 16.08 GiB\\nRequested               : 4.83 GiB\\n"
            "Device limit            : 22.20 GiB\\nFree (according to CUDA): 11.12 MiB\\nPyTorch limit (set by "
            "user-supplied memory fraction)\\n                        : 17179869184.00 GiB\")'\n")
    (ev,) = report(line)["oom_events"]
    gib = 2**30
    assert ev["message_format"] == "cuda-malloc-async"
    assert (round(ev["allocated_by_pytorch_bytes"] / gib, 2), round(ev["tried_to_allocate_bytes"] / gib, 2),
            round(ev["total_capacity_bytes"] / gib, 2), round(ev["free_bytes"] / 2**20, 2)) == (16.08, 4.83, 22.2, 11.12)
    # the table on the lines below, as PyTorch prints it, reads the same
    (same,) = report(line.replace("\\n", "\n"))["oom_events"]
    assert same["tried_to_allocate_bytes"] == ev["tried_to_allocate_bytes"]


@pytest.mark.parametrize("line, found", [
    # text-generation-inference's router when its warmup ran out of device memory
    ("ERROR warmup{max_prefill_tokens=31000}:warmup: text_generation_router_v3::client: backends/v3/src/client/mod.rs:45: "
     "Server error: Not enough memory to handle 31000 prefill tokens. You need to decrease `--max-batch-prefill-tokens`",
     True),
    # ... and the launcher's own last line, which repeats it
    ('Error: Warmup(Generation("Not enough memory to handle 31000 prefill tokens. You need to decrease '
     '`--max-batch-prefill-tokens`"))', True),
    # ... not a sentence that says the words
    ("we think there is not enough memory to handle 31000 prefill tokens on this card", False),
    ("if you get error: Not enough memory to handle 4096 prefill tokens, lower the limit", False),
])
def test_an_inference_servers_warmup_that_ran_out_of_device_memory(line, found):
    events = report(line + "\n")["oom_events"]
    assert [e["message_format"] for e in events] == (["inference-engine-budget"] if found else [])


def test_mlc_llms_memory_check_believed_only_when_its_figures_say_so():
    msg = ("TVMError: Check failed: (output_res.IsOk()) is false: Insufficient GPU memory error: The available single "
           "GPU memory is {avail} MB, which is less than the sum of model weight size (51.083 MB) and temporary buffer "
           "size (106.819 MB).\n")
    (short,) = report(msg.format(avail="120.500"))["oom_events"]
    assert short["message_format"] == "mlc-memory-check" and short["symptom"] is None
    assert short["tried_to_allocate_bytes"] == int((51.083 + 106.819) * 2**20)
    # 19 GB available for 158 MB: the check misfired, and no memory incident is named
    r = report(msg.format(avail="19314.976"))
    (ev,) = r["oom_events"]
    assert ev["symptom"] and "misfired" in ev["symptom"] and r["diagnoses"] == []
    # a message wrapped before its last part is summed with the next line, and not judged cut
    wrapped = ("TVMError: Insufficient GPU memory error: The available single GPU memory is 6000.000 MB, which is less "
               "than the sum of model weight size (3615.133 MB) and temporary\nbuffer size (2845.078 MB).\n")
    (ev,) = report(wrapped)["oom_events"]
    assert ev["symptom"] is None and ev["tried_to_allocate_bytes"] == int((3615.133 + 2845.078) * 2**20)
    # ... nor when the wrap cut a figure (its parts cannot be summed then)
    (split,) = report(wrapped.replace("(2845.078", "(28\n45.078").replace("temporary\nbuffer", "temporary buffer"))[
        "oom_events"]
    assert split["symptom"] is None and split["tried_to_allocate_bytes"] is None
    (cut,) = report(wrapped.split("\n")[0] + "\n")["oom_events"]
    assert cut["symptom"] is None and cut["tried_to_allocate_bytes"] is None


def test_deepspeeds_inference_workspace_that_does_not_fit_is_another_librarys_memory():
    r = report('  File "/env/site-packages/deepspeed/model_implementations/transformers/ds_transformer.py", line 114, '
               'in forward\n    self.allocate_workspace(self.config.hidden_size, self.config.heads,\n'
               "RuntimeError: Workspace can't be allocated, no enough memory.\n")
    (ev,) = r["oom_events"]
    assert (ev["kind"], ev["message_format"]) == ("cuda_runtime_error", "library-allocator")
    assert r["diagnoses"][0]["incident"] == "non-pytorch-memory"
    assert report("the workspace can be allocated later; there is enough memory\n")["oom_events"] == []


@pytest.mark.parametrize("bar,step", [
    # a bar counting frames, examples or shards is not the training's progress
    ("frame loading (JPEG): 100%|##########| 1581/1581 [00:38<00:00, 41.04it/s]", None),
    ("Map (num_proc=8): 100%|##########| 120000/120000 [00:31<00:00, 3870.12 examples/s]", None),
    ("Loading checkpoint shards: 100%|##########| 4/4 [00:05<00:00,  1.30s/it]", None),
    # ... a bar with no description, or one named for training, is
    (" 45%|####5     | 450/1000 [01:00<01:10,  7.50it/s]", 450),
    ("Epoch 3: 45%|####5     | 450/1000 [01:00<01:10,  7.50it/s, loss=0.31]", 450),
])
def test_only_a_training_bar_gives_the_step(bar, step):
    d = report(bar + "\ntorch.OutOfMemoryError: CUDA out of memory. Tried to allocate 18.53 GiB. GPU 0 has a total "
               "capacity of 79.15 GiB of which 1.20 GiB is free.\n")
    assert d["phase_detail"]["step"] == step


@pytest.mark.parametrize("log,phase", [
    # a training loss printed as NaN: the forward pass computed it
    ("2023/06/09 23:47:22 - mmengine - INFO - Epoch(train) [165][300/351] lr: 2.3e-03 memory: 48596 loss: nan\n",
     "forward"),
    ("{'loss': nan, 'grad_norm': nan, 'learning_rate': 4e-05, 'epoch': 0.01}\n", "forward"),
    # ... a keras line names the training loss first, the validation's after it
    ("300/300 - 9s 30ms/step - loss: nan - accuracy: 0.1 - val_loss: nan - val_accuracy: 0.1\n", "forward"),
    # an evaluation's loss: the evaluation
    ("[76000/5000000] valid loss: nan accuracy: 0.001, norm_ED: 369951.00\n", "eval"),
    ("  eval_loss               =        nan\n", "eval"),
    # a NaN the job went on from, to fail otherwise: that failure's place (here none) decides
    ("iter 3198: loss nan, time: 123.08ms\n"
     "RuntimeError: probability tensor contains either `inf`, `nan` or element < 0\n", None),
])
def test_a_nan_loss_shows_in_the_pass_that_computed_it(log, phase):
    r = report(log)
    assert r["oom_events"] == [] and r["phase"] == phase


def test_gnu_times_report_of_a_sigkill_is_a_kill_and_no_other_signal_is():
    log = ("$ /usr/bin/time -v python test.py\nLoading necessary files...\nCommand terminated by signal 9\n"
           '\tCommand being timed: "python test.py"\n\tMaximum resident set size (kbytes): 12009284\n\tExit status: 0\n')
    r = report(log)
    (ev,) = r["oom_events"]
    assert ev["kind"] == "host_oom_killer" and ev["evidence"][0]["line"] == 3
    assert r["phase"] == "data_loading"
    assert report(log.replace("signal 9", "signal 15"))["oom_events"] == []
    # ... only as GNU time prints it, alone on its line
    assert report("the command terminated by signal 9 would be reported here\n")["oom_events"] == []


def test_a_dataloader_kill_quoted_in_a_sentence_is_still_one():
    r = report('I set workers_per_gpu:1,but still got the problem"RuntimeError: Dataloader worker (pid 15623) is '
               'killed by signaled: Killed". I wander it is caused by the limitation of GPU memory?\n')
    (ev,) = r["oom_events"]
    assert ev["kind"] == "dataloader_killed"


def test_frames_with_typographic_quotes_and_their_code_joined_on_are_frames():
    log = ("Traceback (most recent call last):\n\n"
           "File “/home/user/app/sections/chat.py”, line 194, in load_cfg_model_tokenizer model = cfg.model_class(cfg)\n\n"
           "File “/env/lib/python3.10/site-packages/transformers/models/auto/auto_factory.py”, line 566, in "
           "from_pretrained return model_class.from_pretrained(\n")
    r = report(log)
    assert [(f["function"], f["code"]) for f in r["frames"]] == [
        ("load_cfg_model_tokenizer", "model = cfg.model_class(cfg)"),
        ("from_pretrained", "return model_class.from_pretrained(")]
    assert r["phase"] == "model_load"


def test_the_onnx_exporters_diagnostic_banner_names_torchs_version():
    log = ("============= Diagnostic Run torch.onnx.export version 2.0.1+cu117 =============\n"
           "verbose: False, log level: Level.ERROR\n"
           "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 86.00 MiB (GPU 0; 23.69 GiB total "
           "capacity; 23.32 GiB already allocated; 5.88 MiB free; 23.32 GiB reserved in total by PyTorch)\n")
    assert report(log)["environment"]["torch_version"] == "2.0.1"
    # ... and no other name's version ("Diagnostic Run onnxscript version 0.1.0")
    assert report(log.replace("torch.onnx.export version 2.0.1+cu117", "onnxscript version 0.1.0"))[
        "environment"]["torch_version"] is None


def test_ggmls_two_lines_of_one_failed_buffer_are_one_event_and_its_device_is_read_below_the_echo():
    log = ("ggml_backend_cuda_buffer_type_alloc_buffer: allocating 8900.01 MiB on device 0: cudaMalloc failed: "
           "out of memory\n"
           "ggml_gallocr_reserve_n: failed to allocate CUDA0 buffer of size 9332334592\n"
           "llama_new_context_with_model: failed to allocate compute buffers\n")
    (ev,) = report(log)["oom_events"]
    assert ev["device_index"] == 0 and [e["line"] for e in ev["evidence"]] == [1, 2]
    # ... not two buffers of other sizes
    assert len(report(log.replace("9332334592", "9332434592"))["oom_events"]) == 2
    # ggml's check with its source's echo between the error and the device
    (ev,) = report("CUDA error: out of memory\n...ggml-cuda.cu:97: CUDA error\n"
                   "  current device: 1, in function alloc at ...ggml-cuda.cu:476\n")["oom_events"]
    assert (ev["message_format"], ev["device_index"]) == ("ggml-cuda-check", 1)


def test_a_dataloader_workers_own_traceback_is_data_loading_however_deep():
    frames = "".join(f'  File "/root/proj/data/reader_{k}.py", line {10 + k}, in read_{k}\n    x = read_{k + 1}()\n'
                     for k in range(8))
    log = ("Original Traceback (most recent call last):\n"
           '  File "/usr/lib/python3.10/dist-packages/torch/utils/data/_utils/worker.py", line 351, in _worker_loop\n'
           "    data = fetcher.fetch(index)\n" + frames + "ValueError: bad record\n")
    assert report(log)["phase"] == "data_loading"
    # ... and the same frames run by the main process are not
    assert report("Traceback (most recent call last):\n" + frames + "ValueError: bad record\n")["phase"] is None


def test_the_one_process_a_cut_message_lists_is_this_process():
    """NVML lists every process on the device, this one too: a list of one, with no "this
    process" sentence and the message cut before PyTorch's figures, is this process."""
    cut = ("torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 62.54 GiB. GPU 1 has a total capacty "
           "of 79.26 GiB of which 23.11 GiB is free. Process 3987923 has 56.13 GiB memory in use. Of the allocated\n")
    assert "stale-gpu-process" not in [d["incident"] for d in report(cut)["diagnoses"]]
    # ... but with PyTorch's figures, a process that holds far more than they say is another's
    whole = cut.replace("Of the allocated\n", "Of the allocated memory 1.10 GiB is allocated by PyTorch, and 20.00 MiB "
                        "is reserved by PyTorch but unallocated.\n")
    assert report(whole)["diagnoses"][0]["incident"] == "stale-gpu-process"


def test_a_rich_frame_whose_left_edge_the_paste_cut_is_still_a_frame():
    log = ("bigcode-evaluation-harness/lm_eval/utils.py:388 in        │\n"
           "│ complete_code                                                    │\n"
           "│ ❱ 388 │   │   │   │   code_gens[sample].append(                   │\n")
    r = report(log)
    assert [(f["file"], f["function"], f["lineno"]) for f in r["frames"]] == [
        ("bigcode-evaluation-harness/lm_eval/utils.py", "complete_code", 388)]
    assert r["phase"] == "eval"


def test_cross_validation_trains_a_model_per_fold_and_is_no_evaluation():
    d = report('Traceback (most recent call last):\n  File "/src/chemprop/train/cross_validate.py", line 35, in cross_validate\n'
               "    model_scores = run_training(args, logger)\n  File \"/src/chemprop/train/run_training.py\", line 203, in run_training\n"
               "    writer=writer\n"
               "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB\n")
    assert d["phase"] != "eval"


def test_a_warnings_source_line_is_the_failing_call_only_right_above_the_error():
    warned = ("/src/comfy/ldm/modules/attention.py:357: UserWarning: 1Torch was not compiled with flash attention.\n"
              "  out = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)\n")
    oom = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 50.00 MiB\n"
    # the program printed on after the warning: the warned call ran before
    assert report(warned + "Requested to load SDXL\nLoading 1 new model\n" + oom)["phase"] != "forward"
    # the error right below it: the call that warned is the one that failed
    assert report(warned + oom)["phase"] == "forward"
    # a code line opening the log has no warning above it, whatever the log's last line says
    assert report("  out = torch.nn.functional.scaled_dot_product_attention(q, k, v)\nretrying\n" + oom
                  + "/src/x.py:1: UserWarning: printed later\n")["phase"] == "forward"


def test_a_log_that_stops_in_the_dataloaders_worker_check_leads_to_a_dead_worker():
    d = report('Traceback (most recent call last):\n  File "train.py", line 70, in train\n    loss.backward()\n'
               '  File "/opt/conda/lib/python3.10/site-packages/torch/utils/data/_utils/signal_handling.py", line 66, in handler\n'
               "    _error_if_any_worker_fails()\n")
    leads = [x["incident"] for x in d["diagnoses"]]
    assert leads[:2] == ["dataloader-host-oom", "shm-exhausted"] and all(x["warning"] for x in d["diagnoses"])
