"""The phase a traceback's frames say: saving, loading, evaluation and data loading anywhere
in the stack (their frames wrap the training code), the training step's passes read from the
innermost frame outwards, and the code lines a cut or shallow traceback leaves.

Read by ``parsers/phase.py``, which falls back on markers and the errors' own hints when the
frames say nothing.
"""
from __future__ import annotations

from typing import Optional

from ..facts.models import Frame
from ..read.patterns import lazy

# (phase, frame pattern) checked against every frame, in this order
_ANYWHERE = (
    ("checkpoint_save", lazy(
        r"save_checkpoint|_save_checkpoint|\bsave_model\b|:_save\b|save_pretrained|consolidated_16bit_state_dict|save_16bit_model"
        r"|full_state_dict|_full_pre_state_dict_hook|_common_unshard_pre_state_dict_hook|_full_post_state_dict_hook|get_state_dict"
        r"|fsdp_save|save_fsdp_model|save_fsdp_optimizer|save_model_checkpoint|save_optimizer_checkpoint|save_state\b|_save_to_state_dict"
        r"|save_peft_model|torch/serialization\.py:save\b|_save_optimizer_and_scheduler|save_lora"
        # a script's own wrapper around the save (the Alpaca-derived "safe_save_model_for_hf_trainer";
        # not a function that trains and then saves, "train_and_save_model")
        r"|:\w*safe_save_model\w*$|:save_model_(?:for|to)_\w+$"
        # torch.save's native writer, in a crash's C++ frames
        r"|PyTorchStreamWriter::"
        # safetensors writing a file; a trainer's own save of its weights or checkpoint
        # ("save_stable_diffusion_checkpoint", lycoris' "save_weights")
        r"|safetensors/torch\.py:(?:save|save_file)\b|:_?save_(?:\w+_)?(?:checkpoint|ckpt|weights)$"
        # Megatron's distributed checkpointing finishing an asynchronous save
        r"|dist_checkpointing/strategies/async_utils\.py"
        # FSDP gathering full parameters outside forward/backward: summon_full_params for a save
        r"|_unshard_fsdp_state_params|summon_full_params|_unshard_params_for_summon"
        # a sharded optimizer's state gathered to be saved (fairscale's OSS, torch's
        # ZeroRedundancyOptimizer): nothing else calls it
        r"|consolidate_state_dict\b"
        # torch.distributed.checkpoint writing a save (its saver, its stager copying the state
        # off the device, the file system writer)
        r"|distributed/checkpoint/(?:state_dict_saver|_state_dict_stager)\.py:|distributed/checkpoint/filesystem\.py:write")),
    ("checkpoint_load", lazy(
        r"_load_optimizer_and_scheduler|_load_from_checkpoint|load_checkpoint\b|_load_zero_checkpoint|load_fsdp_optimizer|load_fsdp_model"
        r"|_load_rng_state|load_model_checkpoint|load_adapter|set_peft_model_state_dict|load_optimizer_checkpoint|_load_checkpoint|load_sharded_optimizer"
        # the Trainer reloading its best checkpoint at the end of training
        r"|_load_best_model|load_sharded_checkpoint|_load_from_peft_checkpoint"
        # an optimizer's own load_state_dict (it deep-copies the saved state): a checkpoint read back
        r"|optim/optimizer\.py:(?:\w+\.)?load_state_dict\b"
        # a trainer restoring its saved state (Lightning's checkpoint connector: restore_model,
        # restore_training_state, _restore_modules_and_callbacks; a script's restore_checkpoint)
        r"|:_?(?:restore|resume)_(?:\w+_)?(?:model|checkpoint|ckpt|optimizers?|training_state|callbacks)(?:_\w+)?$"
        # DeepSpeed's tools that read a saved ZeRO checkpoint back to convert it (zero_to_fp32.py,
        # copied beside every checkpoint; deepspeed/checkpoint/'s ds_to_universal and its readers)
        r"|(?:^|/)zero_to_fp32\.py:|deepspeed/checkpoint/\w+\.py:"
        # ... and torch.distributed.checkpoint reading one back into a model or an optimizer
        # (not its set_model_state_dict alone: FSDP2 trainers load pretrained weights with it)
        r"|distributed/checkpoint/state_dict_loader\.py:|distributed/checkpoint/filesystem\.py:read")),
    ("eval", lazy(
        r"\bevaluate\b|evaluation_loop|prediction_step|prediction_loop|\bpredict\b|\bgenerate\b|:_sample\b|beam_search|nested_concat"
        # transformers' helpers that pad and join the predictions an evaluation gathers
        r"|trainer_pt_utils\.py:(?:torch|numpy)_pad_and_concatenate\b"
        r"|evaluation_step|validation_step|eval_step|run_validation|:evaluation\b"
        # a trainer's own test and validation loops (Lightning's trainer.test / trainer.validate)
        r"|trainer\.py:(?:test|validate|run_test|run_evaluation)$"
        # reinforcement learning's rollouts: the policy generating ("generate_sequences")
        r"|[:_]generate_(?:sequences|samples)$|:(?![\w]*train)(?:\w+_)?rollout(?:_\w+)?$"
        # TRL's and its forks' "unwrap_model_for_generation": the policy gathered to generate
        r"|_for_generation$"
        # transformers' generation code (older releases' decoding loops are "sample", "greedy_search")
        r"|/transformers/generation/utils\.py:"
        # an inference routine run inside a training script (MONAI's sliding_window_inference
        # in its validation, a script's run_inference)
        r"|:(?:\w+_)?inference$"
        # ... or named for it in short, at the name's end ("infer", "batch_infer", GPT-SoVITS'
        # "infer_panel_batch_infer"; not "infer_shapes" or "infer_modules_masks", which deduce)
        r"|:(?:\w+_)?infer$"
        # images sampled for the logs while a generative model trains (latent diffusion's
        # log_images / sample_log, diffusers' examples' log_validation, kohya's sample_images)
        r"|:(?:log_images|sample_log|log_validation|sample_images)$"
        # a script's own evaluation function (validate(), run_eval(), val_epoch(), a trainer's
        # private _eval_loop()), unless its name says it trains or saves as well
        # (train_and_evaluate; the HF Trainer's _maybe_log_save_evaluate, which saves first;
        # cross_validate, which trains a model per fold)
        r"|:_{0,2}(?![\w]*(?:train|save|cross_val))(?:\w+_)?(?:validate|validation|evaluate|evaluation|eval|valid|"
        r"(?:val|test)(?=_(?:step|epoch|loop|one_epoch|batch)\b))(?:_\w+)?$")),
    # a DataLoader worker's own loop: the worker process only loads data, whatever its dataset
    # calls below (the frames of its "Original Traceback", however deep)
    ("data_loading", lazy(r"torch/utils/data/_utils/worker\.py:_worker_loop$")),
)
# a model generating tokens: transformers' generation loop (generate, its _sample / _prefill /
# beam searches, the model's prepare_inputs_for_generation), a policy's rollout, or a run
# whose evaluation generates (predict_with_generate): the marker "generation"
# (the decoding loops' private names only in transformers' own generation code: other
# libraries' "_sample" is a scheduler's or a sampler's)
_GENERATION = lazy(
    r"/transformers/generation/\w+\.py:|:generate$|:prepare_inputs_for_generation$|[:_]generate_(?:sequences|samples)$"
    # a decoding loop of the gpt-fast kind, copied into many models' own inference code
    # ("decode_one_token", "decode_n_tokens", GPT-SoVITS' and fish-speech's "decode_next_token")
    r"|:decode_(?:one|next|n)_tokens?$")
_GENERATE_CONFIG = lazy(r"predict_with_generate['\"]?\s*[:=]\s*['\"]?(?i:true)"
                        # the seq2seq examples' command-line flag, bare or with a true value
                        r"|--predict_with_generate(?:[=\s]+(?i:true)\b|(?![\w-])(?!\s*[=\s]\s*(?i:false)\b))")
# (Chainer's updaters run a step in update_core)
_TRAINING = lazy(r"_inner_training_loop|training_step|\btrain_step\b|:train\b|train_one_epoch|run_training|fit\b|train_loop|\bstep\b"
                 r"|:update_core\b")
# a JAX trainer's function that creates its parameters and optimizer state (Flax's
# "create_train_state", "init_train_state"): read as a frame's function and as a call
_TRAIN_STATE = r"_?(?:init|initialize|create|make|build|setup)_train(?:ing)?_state"
_MODEL_LOAD = lazy(
    r"from_pretrained|_load_pretrained_model|_load_state_dict_into_meta_model|load_state_dict_into_model|safe_load_file"
    r"|set_module_\w{0,20}tensor_to_device|dispatch_model|load_model\w*\b|load_pretrained|_configure_distributed_model|deepspeed/__init__.py:initialize"
    r"|_post_init_method|prepare_model|"
    # a trainer setting up its model ("setup_model_and_tokenizer", a plugin's "pre_model_load" hook)
    r":(?:setup|init|initialize)_model(?:_and_\w+)?$|:pre_model_load$|"
    # a JAX trainer creating its train state
    r":" + _TRAIN_STATE + r"$|"
    # ZeRO-3's zero.Init: the model's construction, tensor constructors wrapped while it is
    # built, and the first partitioning of each new parameter (later ones free, not allocate)
    r"partition_parameters\.py:(?:__init__|wrapped_fn|_partition_param)\b|"
    # bitsandbytes quantizing a layer's weights as they are moved to the device
    r"bitsandbytes/nn/modules\.py:(?:\w+\.)?(?:_quantize|cuda|to)\b|"
    # Megatron-Core building its layers from specs, Transformer Engine's layers allocating
    # their weights in their constructors
    r"spec_utils\.py:build_module\b|transformer_engine/pytorch/module/\w+\.py:__init__\b|load_model_and_tokenizer|get_model\b|create_model\b|build_model|"
    r"\bto_empty\b|[:.]_apply\b|:cuda\b|module.py:to\b|module\.py:convert\b|_broadcast_model|_sync_module_states|sync_module_states"
    # deferred initialisation: the model's tensors materialised on the device (ColossalAI, torchdistx, FSDP meta init)
    r"|lazy_init\.py|_materialize_data|materialize_module|deferred_init"
    # a model built on the device: "with torch.device('cuda'):" routes its layers' parameter
    # allocations through torch/utils/_device.py, under a module's __init__
    r"|utils/_device\.py:__torch_function__|nn/modules/\w+\.py:(?:__init__|reset_parameters)\b"
    # accelerate's prepare() places the model; DeepSpeed builds its (ZeRO) optimizer in initialize()
    r"|accelerator\.py:(?:prepare|_prepare_one|_prepare_deepspeed)\b|_configure_optimizer|_configure_zero_optimizer"
    # an OOM inside a trainer's constructor is the model being placed on the device
    r"|trainer\.py:__init__|_move_model_to_device|create_reference_model|create_ref_model"
    # DistributedDataParallel's constructor: its reducer allocates the gradient buckets; it
    # (and FSDP's sync_module_states) broadcasts rank 0's weights to the others
    r"|parallel/distributed\.py:(?:__init__|_ddp_init_helper)\b|distributed/utils\.py:_sync_params_and_buffers\b"
    # an engine creating its weights (lmdeploy's create_shared_weights and _create_weight_func;
    # not vLLM's load_weights, which a GRPO trainer also calls to sync its policy every step)
    r"|:_?create_(?:\w+_)?weights?(?:_\w+)?$"
    # accelerate's big-model loading: weights dispatched or offloaded to CPU and disk as they load
    r"|accelerate/big_modeling\.py:|accelerate/utils/offload\.py:"
    # DeepSpeed building its ops as the engine or model is set up
    r"|deepspeed/ops/op_builder/"
    # an inference engine sizing its KV cache at start-up (vLLM's memory profile and cache check)
    r"|vllm/[^:]{0,200}:(?:_check_enough_kv_cache_memory|determine_available_memory|profile_run|_initialize_kv_caches)$"
    # ... and constructing its engine, which loads the model (MQLLMEngine, AsyncLLMEngine, LLMEngine)
    r"|vllm/[^:]{0,200}:(?:\w+\.)?from_engine_args$")
_DATA = lazy(r"dataloader\.py:(?:__next__|_next_data|_get_data|_try_get_data)|_MultiProcessingDataLoaderIter|fetch\b|collate|arrow_dataset\.py|datasets/.*:map\b|preprocess_"
             # a script's own module named for loading data ("network/data_loader.py:MSAFeaturize")
             r"|(?:^|[/\\])data_loaders?\.py:"
             # (tokenising the data; a function that sets up a tokenizer, "setup_model_and_tokenizer", loads)
             r"|tokeniz(?!er$)"
             # a DataLoader starting its iterator and its worker processes (PyTorch's and Paddle's:
             # "dataloader.py:_get_iterator", "DataLoaderIter(self)", "dataloader_iter.py") and a
             # worker's own loop
             r"|dataloader\.py:(?:__iter__|_get_iterator|_worker_loop|__init__)\b|\bDataLoaderIter\b|dataloader_iter\.py:"
             # TensorFlow's input pipeline handing over its next element (tf.data's iterator)
             r"|data/ops/iterator_ops\.py:_?next_internal\b|gen_dataset_ops\.py:iterator_get_next\b"
             # the main process's handler for a DataLoader worker's death, innermost wherever the
             # main process was when the worker died (an optimizer step, a forward)
             r"|data/_utils/signal_handling\.py:handler\b"
             # Apache Arrow's own code (its Cython sources: "pyarrow/table.pxi"), under a dataset's tables
             r"|(?:^|/)pyarrow/"
             # a trainer caching its dataset's latents or text-encoder outputs before training
             # (kohya's sd-scripts and their forks: cache_latents, cache_batch_latents)
             r"|:cache_(?:batch_)?(?:latents|text_encoder_outputs)\b"
             # a trainer preparing its datasets ("prepare_dataset", "load_tokenized_prepared_datasets")
             r"|:\w*(?:prepare|load|build|get|make|create)_\w*datasets?$"
             # a dataset package's own code ("mmaction/datasets/base.py:__getitem__", torchvision's
             # datasets): its item getters and loaders, in a file at most two folders below it (not
             # a project or an environment kept under a folder of that name, nor any other function)
             r"|(?:^|/)datasets?/(?:[\w.-]{1,60}/){0,2}[\w.-]{1,60}\.py:"
             r"(?:__getitem__|__iter__|__next__|_?(?:load|prepare|read|fetch|get_item|getitem)\w*)$"
             # data-loading libraries: NVIDIA DALI's pipelines, MXNet's data iterators; pandas reading
             # a file (its readers and their Cython parser; not its writers)
             r"|(?:^|/)nvidia/dali/|(?:^|/)mxnet/io/|(?:^|/)pandas/io/parsers/|(?:^|/)pandas/io/[\w/]{1,60}\.py:_?read\w*$"
             r"|(?:^|/)pandas/_libs/parsers\.pyx:"
             # an image, volume, slide or audio reader reading a file (OpenSlide's read_region,
             # nibabel's get_fdata, SimpleITK's ReadImage, PIL opening an image; not their writers)
             r"|(?:^|/)(?:openslide|tifffile|nibabel|SimpleITK|pydicom|decord|imageio|soundfile|h5py|zarr)/[\w./-]{0,80}:"
             r"_{0,2}(?:read|load|open|imread|get_data|get_fdata|dcmread|decode|getitem|ReadImage)\w*$"
             r"|(?:^|/)PIL/(?:Image|ImageFile)\.py:(?:open|load)$"
             # the DataLoader's pin-memory thread; a worker's batch shared through file descriptors
             # (not a CUDA tensor shared with another process, as RL trainers hand weights to vLLM)
             r"|data/_utils/pin_memory\.py:|torch/multiprocessing/reductions\.py:reduce_storage$"
             r"|multiprocessing/resource_sharer\.py:"
             # Lightning moving a batch to the device
             r"|:(?:batch_to|move_data_to_device|transfer_batch_to_device|_apply_batch_transfer_handler)$")
# tqdm yielding its iterable's next item: the loader's, when no model's code or pass runs below it
# (a loop's body runs in its caller's frame; a generator that calls the model is the model's pass)
_TQDM_NEXT = lazy(r"(?:^|/)tqdm/\w+\.py:__iter__$")
# innermost first
_STEP = (
    # (a learning-rate scheduler's constructor builds no optimizer state: it runs at set-up or on a
    # resume; its wrapper around the optimizer's step is the step)
    ("optimizer_step", lazy(
        r"optim/(?!lr_scheduler\.py:__init__$)\w+\.py|optimizer\.py:(?:step|wrapper)|:_init_group\b|_multi_tensor_adam|_fused_adam|_single_tensor_adam|:_optimizer_step\b"
        r"|stage_1_and_2\.py:step\b|stage3\.py:step\b|unscale_and_clip_grads|_take_model_step|initialize_optimizer_states|_create_fp32_partitions"
        r"|clip_grad_norm|bnb/optim|bitsandbytes/optim|cpu_adam|fused_adam|:step\b.*optimizer"
        # AMP's GradScaler unscales the gradients as the optimizer step begins; DeepSpeed's fp16
        # optimizers update their loss scale in step() (an overflow at the minimum scale raises there)
        r"|grad_scaler\.py:(?:unscale_|_unscale_grads_|step)\b|loss_scaler\.py:update_scale\b|:_update_scale\b"
        # MXNet's parameter update through its kvstore; ZeRO-3's step preparing each sub-group
        r"|(?:^|/)mxnet/kvstore\.py:|:_update_params(?:_on_kvstore)?$|stage3\.py:_prepare_(?:fp32_grad_for_)?sub_group\b")),
    # (apex's amp.scale_loss context wraps the backward pass: its exit unscales and updates the scale)
    ("backward", lazy(r"backward|_bwd(?:_kernel)?\b|autograd/__init__\.py|_engine_run_backward|run_backward|autograd/function\.py:apply|checkpoint\.py:(?:backward|unpack|recompute)|graph\.py:_engine_run_backward"
                      r"|apex/amp/handle\.py:scale_loss\b")),
    # modeling_utils.py is transformers' loading and saving code, not a model's forward
    # (a policy's log-probabilities of its tokens are a forward pass: "get_logprobs",
    # "compute_log_prob", TRL's "_get_per_token_logps")
    ("forward", lazy(r"\bforward\b|:\w*(?:log_?probs?|logps)\b|_fwd(?:_kernel)?\b|/activations?\.py:|_inductor/|torchinductor|compiled_fn|_call_impl|_wrapped_call_impl|modeling_(?!utils\b|\w*_utils\b)\w+\.py|attention|\bmlp\b|compute_loss|cross_entropy|log_softmax|lm_head|scaled_dot_product|flash_attn|functional\.py"
                     # a loss function computed from the step's outputs ("feature_loss" in losses.py,
                     # "compute_content_loss"): the end of the forward pass
                     # (not one that logs, averages or saves a loss, nor a validation loss)
                     r"|:(?!(?:log|print|reduce|record|save|update|gather)_)(?!\w*(?:val|valid|eval|test)_)\w+_loss\b"
                     r"|/losses?\.py:"
                     # transformers' attention masks, built by the model's forward for each batch
                     # ("masking_utils.py:and_mask", the older "modeling_attn_mask_utils.py")
                     r"|transformers/(?:masking_utils|modeling_attn_mask_utils)\.py:"
                     # a function named for the pass among other words ("_exec_forward_pass", "model_forward";
                     # not a hook that prepares one, "prepare_block_devices_before_forward");
                     # older PyTorch's Module.__call__; DataParallel running its replicas
                     r"|:(?!\w*(?:before|pre|prepare)_forward)(?:\w+_)?forward(?:_\w+)?$|nn/modules/module\.py:__call__$|nn/parallel/parallel_apply\.py:"
                     # layer libraries' ops (scatter, sparse convolutions, graph layers)
                     r"|(?:^|/)(?:torch_scatter|torch_sparse|torch_cluster|MinkowskiEngine|spconv)/|torch_geometric/nn/"
                     # a detector's training targets: anchors assigned to boxes by their overlaps
                     # (mmdetection's assigners; detectron2's and DETR's matchers, detectron2's
                     # labelling of anchors and proposals and its pairwise IoU)
                     r"|(?:^|/)(?:assigners|iou_calculators)/|:(?:bbox|box|boxlist)_(?:overlaps|iou)$"
                     r"|/matcher\.py:|:label_and_sample_(?:anchors|proposals)$|:pairwise_iou$")),
)


# libraries that write pictures: their save() calls are no checkpoint
_IMAGE_LIB = lazy(r"(?:^|[/\\])(?:PIL|imageio|matplotlib)[/\\]")
_NO_GRAD = lazy(r"(?:autograd/grad_mode|utils/_contextlib)\.py:decorate_(?:no_grad|context)$")
_WEIGHT_UPDATE = lazy(r"(?i:update|averag|step)|(?:^|_)(?i:ema|swa)(?:_|$|[A-Z])|EMA|Ema|SWA|Swa")
# the code of a package's evaluation or inference module ("rfdetr/evaluation/matching.py",
# "detectron2/evaluation/", "nnunetv2/inference/predict_from_raw_data.py"), or of a package that
# only evaluates: the evaluation harnesses ("lm_eval/models/huggingface.py", OpenCompass, lighteval)
_EVAL_PACKAGE = lazy(r"(?:^|/)(?:(?:eval|evaluation|evaluators?|inference)/[^/:]{1,200}|(?:lm_eval|opencompass|lighteval)/[^:]{1,200}):")
_LIBRARY = lazy(r"[/\\](?:site|dist)-packages[/\\]|^<frozen |[/\\]lib[/\\]python\d")


def _picture_saved(phase: str, fr: Frame) -> bool:
    """A "save" in a library that writes pictures (PIL, imageio, matplotlib): no checkpoint."""
    return phase == "checkpoint_save" and _IMAGE_LIB.search(fr.file) is not None


def _folder(fr: Frame) -> str:
    """The directory of a frame's file, with "/" for Windows' separators."""
    return fr.file.replace("\\", "/").rpartition("/")[0]


def _frame_text(fr: Frame) -> str:
    # the function, not the code line: code lines name arguments such as
    # resume_from_checkpoint=... or eval_dataset=... that say nothing about where we are.
    # Windows paths read as POSIX ones ("torch\optim\adamw.py"): the patterns of these
    # texts name "/" only (_LIBRARY and _EVAL_SCRIPT read the path as printed).
    path = fr.file.replace("\\", "/")
    return f"{path}:{fr.function}"


# the call in progress in the innermost frame (its code line), when it names the phase
_CALL = (("checkpoint_save", lazy(r"\b_{0,2}save(?!fig\b|_(?:image|img)s?(?:_\w*)?\()\w*\(|\.save\(|save_pretrained\(|state_dict\(\)|checkpoint_and_decide_exit\(")),
         # a method of a trainer's evaluation ("metrics = self.evaluate(...)", "self._evaluate(...)")
         ("eval", lazy(r"\.(?:_?evaluate|_?evaluation_loop|predict|prediction_loop)\(")),
         ("checkpoint_load", lazy(r"\bload_checkpoint\w*\(|\.load_state_dict\(|torch\.load\(")),
         ("model_load", lazy(r"from_pretrained\(|\bload_model\w*\(|\bload_pretrained\w*\(|\bbuild_model\(|\bget_model\("
                             # a JAX trainer's parameters and optimizer state created ("init_train_state(")
                             r"|\b" + _TRAIN_STATE + r"\("
                             # transformers' pipeline factory given a model: it loads the weights
                             # ("pipe = transformers.pipeline(model='org/name', ...)"; calling pipe() is not)
                             r"|\bpipeline\([^)]{0,200}?\bmodel\s*="
                             # the model placed on the device: "model.cuda()", "self.model.to(device)",
                             # "model.to(self.args.device)"; a diffusers pipeline's models placed with it
                             # ("pipe.to(device)")
                             r"|(?:\b(?:model|net|module)\w*|\bpipe(?:line)?)\.(?:cuda\(|to\((?:[\w.]{0,40}?\bdevice\b|['\"]cuda|torch\.device))")))
# the step in progress named by the innermost code line of a cut or shallow traceback:
# "loss.backward()", "optimizer.step()", "out = self.actor(seq, mask)" (a model called)
_CALL_STEP = (("backward", lazy(r"\.backward\(|\bbackward\(")),
              ("optimizer_step", lazy(r"\b(?:optim\w*|scaler)\.step\(")),
              # (a trainer's compute_loss calls the model: HF Trainer's training_step)
              ("forward", lazy(r"(?:^|[=(,]\s*|\breturn\s+)(?:self\.)?_{0,2}(?:model|actor|critic|net|module|encoder|decoder|unet|vae"
                               r"|generator|discriminator|transformer|backbone|\w+_model|compute_loss|predictor"
                               # a submodule called by its attribute: "self.recognition_net(images, h)"
                               r"|(?<=self\.)(?!(?:build|create|make|get|init|setup|load)_)\w+_(?:net|network))\((?!\))")))
# code of an evaluation pass in a script's own loop: results assigned to validation names,
# or a loop over a validation loader
_EVAL_CODE = lazy(r"(?:^|[\s,(])(?:val|valid|validation|eval|test)_(?:loss(?:es)?|out(?:puts?)?|logits|preds?|predictions"
                  r"|acc\w*|metrics?|scores?)\s*(?:,[^=]{0,80})?=(?!=)"
                  r"|\bin\s+(?:self\.)?(?:val|valid|validation|eval|test)_?(?:data_?)?loader\b"
                  # a model kept for inference, called ("pred = infer_model(nf)"; read in a script's
                  # own frames: a library's infer_auto_device_map is model loading)
                  r"|\b(?:infer|inference)_(?:model|net|step)\(")
# a script named for evaluation, inference or a generative model's sampling ("eval_knn.py",
# "predict.py", DiT's "sample_ddp.py"), not one that trains too (nor cross-validation's, which
# trains a model per fold: "cross_validate.py")
_EVAL_SCRIPT = lazy(r"(?:^|[/\\])(?![^/\\]*(?:train|cross_val))(?:[^/\\]*_)?(?:eval|evaluate|evaluation|validate|validation|predict|inference|sample|sampling)"
                   r"(?:_[^/\\]*)?\.py$")
# ... and a detection trainer's "val.py" / "test.py" when a function of it runs, called by its
# train.py each epoch (as the script itself, "test.py" is as often a throwaway training run;
# not "test_image.py", a script trying a model out, or a unit test)
_EVAL_MODULE = lazy(r"(?:^|[/\\])(?:val|test)\.py$")
# a model's own code (its folders), read as the forward pass when nothing else names a phase
_MODEL_DIRS = r"models?|modules|layers|networks?|backbones?"
_MODEL_CODE = lazy(r"(?:^|/)(?:" + _MODEL_DIRS + r"|nets|heads?|necks?|dense_heads|roi_heads|archs?"
                   r"|(?:\w+_)?renderers?)/[^:]{1,200}:")
# ... and the functions that set a layer up: its constructor and the builders and weight
# initialisers it calls (Lasagne's "create_param", mmaction's "inflate_weights"; not weights
# loaded into it, as a policy synced into vLLM each step is), or its buffers allocated as the
# model is initialised (neon's "layers/recurrent.py:allocate")
# (in those folders, or a file named for them: "llama/model.py", "tinycudann/modules.py")
_MODEL_FOLDER = lazy(r"(?:^|/)(?:" + _MODEL_DIRS + r")(?:/[^:]{1,200}|\.py):")
_LAYER_SETUP = lazy(r"^(?:__init__|initiali[sz]e|allocate|_{0,2}(?:build|make|create|construct|init)_\w{1,60}"
                    r"|(?!_{0,2}(?:load|sync|update|copy|set|get|save|broadcast|receive|merge|gather)_)\w{1,60}_weights"
                    r"|reset_parameters)$")
# functions of a model's code that are no forward pass: building, loading or saving it, its
# EMA's update, a sampler's step, metrics and inference ("_make_layer", "p_sample", "compute_map")
_NOT_FORWARD = lazy(r"__init__|(?:^|_)(?:build|load|init|create|make|from_pretrained|save|update|sample|metric|ema|setup|print)"
                    r"|(?i:test|predict|infer|get_bboxes|eval|metric|score)")
# a script's own function that builds its loaders and the data under them ("build_dataloader",
# "get_dataloader" in a prepro.py); not a trainer library's, which only wraps the dataset for the
# step (transformers' get_train_dataloader: the step's own frames decide); or a script's function
# named for the loader it wraps or iterates ("sp_parallel_dataloader_wrapper", "cycle_dataloader")
_LOADER_BUILDER = lazy(r":_{0,2}(?:(?:build|get|make|create|setup|init)_\w{0,20}(?:data_?loaders?|loaders?)|\w{0,30}data_?loader\w{0,30})$")
_SPLIT_FUNCTION = lazy(r":_{0,2}(?:test|val)$")
# multiprocessing starting a process (under a DataLoader starting its workers)
_PROCESS_START = lazy(r"multiprocessing/(?:process|context|popen_\w+|spawn|reduction)\.py:")
# a child process started by spawn (Windows' only start method) still preparing: unpickling its
# process object or re-running the main script ("prepare(preparation_data)"), both of which
# import torch again, before its target runs (multiprocessing/process.py's _bootstrap)
_SPAWN_MAIN = lazy(r"multiprocessing/spawn\.py:spawn_main$")
_SPAWN_PREPARING = lazy(r"multiprocessing/spawn\.py:(?:_main|prepare|_fixup_main_from_path)$")
_SPAWN_TARGET = lazy(r"multiprocessing/process\.py:_bootstrap$")
_WINDOWS_PATH = lazy(r"^[A-Za-z]:[\\/]|\\")
# PyTorch's own code (torch/nn/modules is its layers' library, no model's own folder)
_TORCH_OWN = lazy(r"(?:^|/)torch/")
# a constructor, or a builder of a model's parts ("build_detector", "_make_layer", "init_weights")
_CONSTRUCTS = lazy(r"__init__$|_{0,2}(?:build|make|create|construct|init)_\w{1,60}$")
# a function that creates a training script's optimizer ("set_optimizers", "get_optimizer", "build_optimizer")
_OPTIMIZER_MAKER = lazy(r":_{0,2}(?:set|get|create|build|make|init|initialize|configure|setup)_?optimi[sz]ers?$")
# a code line that makes a new model object ("model = Transformer(model_args)", "self.net = models.ResNet(cfg)")
# (a builder function only under the bare names: "model = build_network(...)", not "model_inputs
# = build_inputs(batch)")
_BUILDS_MODEL = lazy(r"^\s*(?:self\.)?(?:(?:model|net|network|module|transformer|backbone|encoder|decoder)\w*\s*=\s*"
                     r"(?:[A-Za-z_]\w*\.)*[A-Z]\w*\("
                     r"|(?:model|net|network|module|transformer|backbone|encoder|decoder)\s*=\s*"
                     r"(?:[A-Za-z_]\w*\.)*_{0,2}(?:build|make|create|construct)_\w{1,60}\()")
# an optimizer's state read back, named by a caller: its function ("load_opt_state",
# "load_optimizer_state") or the file its code reads ("optimizers.bin", "optimizer.pt")
_OPTIMIZER_FN = lazy(r":\w*(?:optimi[sz]ers?|optims?|opt)_states?\w*$")
_OPTIMIZER_FILE = lazy(r"optimi[sz]ers?\.(?:bin|pt|pth)\b")
# an optimizer's (or its schedule's, its loss scaler's) state loaded on a code line: a resume
_OPTIMIZER_STATE = lazy(r"\b(?:optim(?:izer)?s?|(?:lr_)?scheduler|(?:grad_)?scaler)(?:_\d+)?\.load_state_dict\(")
# reading tensors from disk: a checkpoint or the model's weights, told apart by the callers
_TENSOR_READ = lazy(r"serialization\.py:(?:load|_load)\b|safetensors/torch\.py:load_file|load_state_dict_from_file|safe_load_file")


def _in_a_pass(texts: list[tuple[str, Frame]], only: Optional[str] = None) -> bool:
    """Does one of these frames run a training step's pass (forward, backward, optimizer step),
    or, with ``only``, that one?"""
    return any(rx.search(t) for t, _fr in texts for phase, rx in _STEP if only in (None, phase))


def _layer_setup(texts: list[tuple[str, Frame]]) -> Optional[Frame]:
    """The innermost frame of a model's own code (not PyTorch's layers), when it constructs or
    sets up a layer and no frame above it is in a pass (a helper named "_make_causal_mask" under
    a forward is the forward's; a method below a constructor, such as a warm-up pass, is no setup)."""
    k = next((k for k in range(len(texts) - 1, -1, -1)
              if _MODEL_FOLDER.search(texts[k][0]) and not _TORCH_OWN.search(texts[k][0])), None)
    if k is None or not _LAYER_SETUP.match(texts[k][1].function.rsplit(".", 1)[-1]):
        return None
    if _in_a_pass(texts[:k]):
        return None
    return texts[k][1]


# a script that prepares the data, named for it ("preprocess.py", "tools/preprocess_data.py",
# "prepro.py", "prepare_data.py", "make_dataset.py"), or a script's own function named for it
# ("def vectorize(questions, ...)", "load_data()", "convert_images_to_arrays_train", "load_video_frames")
_PREP_SCRIPT = lazy(r"(?:^|/)(?:pre_?pro\w{0,40}|prepare_?\w{0,20}data\w{0,20}|data_?prep\w{0,20}"
                    r"|(?:make|build|create|gen(?:erate)?)_?dataset\w{0,20})\.py:")
_PREP_FUNCTION = lazy(r":_{0,2}(?:(?:load|read|prepare|preprocess|prep|build|make|create|generate|gen|convert)_\w{0,30}"
                      r"(?:data(?:set)?s?|features?|arrays?|vocab|corpus|samples|examples|images|frames|videos?|audios?|clips)(?:_(?:train|test|val|all))?"
                      r"|vectori[sz]e\w{0,20}|preprocess\w{0,20})$")


def _no_model_below(texts: list[tuple[str, Frame]], k: Optional[int]) -> Optional[Frame]:
    """Frame ``k``, when no model's code or pass runs below it (inside it), else None."""
    if k is None:
        return None
    below = texts[k + 1:]
    if _in_a_pass(below) or any(_MODEL_CODE.search(t) for t, _fr in below):
        return None
    return texts[k][1]


def _preparing(texts: list[tuple[str, Frame]]) -> Optional[Frame]:
    """The outermost frame of a data-preparation script, with no model's code or pass inside it
    (a script that encodes its data with a model is running that model)."""
    return _no_model_below(texts, next((k for k, (t, fr) in enumerate(texts) if _PREP_SCRIPT.search(t) or (
        # (not in an evaluation module: "evaluation/matching.py:build_matching_data" scores)
        not _LIBRARY.search(fr.file) and _PREP_FUNCTION.search(t) and not _EVAL_PACKAGE.search(t))), None))


def _tqdm_next(texts: list[tuple[str, Frame]]) -> Optional[Frame]:
    """tqdm's iterator asked for its iterable's next item, with no model's code or pass below it."""
    return _no_model_below(texts, next((k for k in range(len(texts) - 1, -1, -1) if _TQDM_NEXT.search(texts[k][0])), None))


def phase_from_frames(frames: list[Frame], resumed: bool = False) -> tuple[Optional[str], Optional[Frame]]:
    """The phase the frames say, and the frame that says it. ``resumed``: the job said it
    resumes just before the failure (tensors it reads are then the checkpoint's)."""
    texts = [(_frame_text(fr), fr) for fr in frames]
    for phase, rx in _ANYWHERE:
        for text, fr in texts:
            if rx.search(text) and not _picture_saved(phase, fr):
                return phase, fr
    # a hand-written loop's own code naming its evaluation pass ("val_loss = loss_fn(...)"),
    # unless the frames are in a backward pass or an optimizer step (evaluation has neither)
    training_step = any(rx.search(t) for _phase, rx in _STEP[:2] for t, _fr in texts) or bool(
        frames and frames[-1].code and any(rx.search(frames[-1].code) for _phase, rx in _CALL_STEP[:2]))
    for fr in frames:
        if fr.code and not training_step and not _LIBRARY.search(fr.file) and _EVAL_CODE.search(fr.code):
            return "eval", fr
    # library frames outweigh the user's own function names: a script's train() that calls
    # accelerate's prepare() is placing the model, not training it
    # (library frames that say nothing of where the job was, such as a command-line parser's
    # wrapper around the script's main(), leave it to the script's own names)
    library = [(t, fr) for t, fr in texts if _LIBRARY.search(fr.file)]
    trains = [k for k, (t, _fr) in enumerate(texts) if _TRAINING.search(t)]   # the training frames, once
    in_library = {id(fr) for _t, fr in library}
    training = any(id(texts[k][1]) in in_library for k in trains) or (
        bool(trains) and not any(_MODEL_LOAD.search(t) for t, _ in library))
    reads = [fr for text, fr in texts if _TENSOR_READ.search(text)]
    if reads:
        # an optimizer's state read back is a resume, whatever the script's functions are
        # called ("def load_model(): optimizer.load_state_dict(torch.load(path))")
        if any(fr.code and (_OPTIMIZER_STATE.search(fr.code) or _OPTIMIZER_FILE.search(fr.code)) for fr in frames) \
                or any(_OPTIMIZER_FN.search(text) for text, _fr in texts):
            return "checkpoint_load", reads[-1]
        # library frames decide over the user's function names: tensors read from disk under
        # from_pretrained are the model's weights, under a training loop (or right after the job
        # said it resumes: a script's own torch.load names neither) a checkpoint
        loading_model = any(_MODEL_LOAD.search(t) for t, _ in texts)
        return ("checkpoint_load" if (training or resumed) and not loading_model else "model_load"), reads[-1]
    if frames and frames[-1].code:
        for phase, rx in _CALL:
            if rx.search(frames[-1].code) and not _picture_saved(phase, frames[-1]):
                return phase, frames[-1]
    if not training:
        for k, (text, fr) in enumerate(texts):
            if _MODEL_LOAD.search(text):
                if _in_a_pass([(t, f) for t, f in texts[:k] if id(f) in in_library], only="optimizer_step"):
                    # an optimizer step loads no model: what it calls under "with torch.device(...)"
                    # or moves to the device is its own state (its library frames: a script's own
                    # folder may be named like an optimizer's, "llm-optim/train.py")
                    continue
                # a script's own code below it creating the optimizer ("self.set_optimizers()"
                # in a trainer's constructor): the optimizer's state, not the model
                maker = next((f for t, f in texts[k + 1:] if id(f) not in in_library and _OPTIMIZER_MAKER.search(t)), None)
                if maker is not None:
                    return "optimizer_step", maker
                return "model_load", fr
        if (setup := _layer_setup(texts)) is not None:
            return "model_load", setup
        # a model being constructed: a frame's code makes a new model object ("model =
        # Transformer(model_args)") and every frame below it is a constructor or a library's
        for k, fr in enumerate(frames[:-1]):
            if not (fr.code and _BUILDS_MODEL.search(fr.code)):
                continue
            below = frames[k + 1:]
            # (Python 3.11 prints "Class.__init__"; a builder of the model's parts, "build_detector",
            # "build_dense_head", "_make_layer", constructs too)
            builds = [bool(_CONSTRUCTS.match(f.function.rsplit(".", 1)[-1])) for f in below]
            if any(builds) and all(b or id(f) in in_library for b, f in zip(builds, below)):
                return "model_load", fr
    else:
        # a trainer that builds or places its model inside train() (mmengine's runners; the
        # HF Trainer's accelerate.prepare, DDP's constructor): frames below the innermost
        # training frame that load or place the model are that, not a training step
        for text, fr in texts[trains[-1] + 1:]:
            if any(rx.search(text) for _phase, rx in _STEP):
                break   # a step under way (an offloading hook placing weights in a forward is its)
            if _MODEL_LOAD.search(text):
                return "model_load", fr
        below = texts[trains[-1] + 1:]
        if not _in_a_pass(below) and (setup := _layer_setup(below)) is not None:
            return "model_load", setup
    # a Windows child process that fails while it starts, before its target runs (importing torch
    # again on a full commit charge): on Windows every DataLoader worker is such a child, and a
    # training script's children are its workers
    if (any(_SPAWN_MAIN.search(t) for t, _fr in texts[:3]) and not any(_SPAWN_TARGET.search(t) for t, _fr in texts)
            and (prep := next((fr for t, fr in reversed(texts) if _SPAWN_PREPARING.search(t)), None)) is not None
            and _WINDOWS_PATH.search(prep.file)):
        return "data_loading", prep
    # (a worker process being started lies under multiprocessing's own frames: those are skipped)
    near = [(k, t, fr) for k, (t, fr) in enumerate(texts) if not _PROCESS_START.search(t)][-6:]
    for k, text, fr in reversed(near):
        if _DATA.search(text) or (id(fr) not in in_library and _LOADER_BUILDER.search(text)
                                  and _no_model_below(texts, k) is not None):
            return "data_loading", fr
    if (fetch := _tqdm_next(texts)) is not None:
        return "data_loading", fetch
    if (prep := _preparing(texts)) is not None:
        return "data_loading", prep
    # a script's function named for its split alone, beside its train() (pytorch/examples' "def
    # test(model, device, test_loader)", a trainer's self.test()), with no backward pass or
    # optimizer step under it (model loading and data reading were read above)
    if not training_step:
        split = next((fr for t, fr in texts if id(fr) not in in_library and _SPLIT_FUNCTION.search(t)), None)
        if split is not None:
            return "eval", split
    # the code of a package's evaluation module ("rfdetr/evaluation/matching.py"), below any model
    # loading and data reading, with no backward pass or optimizer step in the stack; not the
    # folder the training loop's own code is in (a training script kept in a folder of that name)
    if not training_step:
        own = {_folder(texts[k][1]) for k in trains}
        for text, fr in texts:
            if fr.function != "<module>" and _folder(fr) not in own and _EVAL_PACKAGE.search(text):
                return "eval", fr
    # a function of the training script run without gradients (torch.no_grad's decorator): sampling or
    # validating images, scoring a batch; the frame below the decorator is that function (unless it
    # updates weights without gradients: an EMA or SWA average, a parameter update). A model's
    # forward below it, or called on its last line, is that pass's; a backward or an optimizer
    # step is not.
    if training and not training_step:
        for k, (text, fr) in enumerate(texts[:-1]):
            if _NO_GRAD.search(text) and k > trains[0] and not _WEIGHT_UPDATE.search(texts[k + 1][1].function):
                return "eval", texts[k + 1][1]
    if frames and frames[-1].code and training:
        for phase, rx in _CALL_STEP:
            if rx.search(frames[-1].code):
                return phase, frames[-1]
    eval_script = next((f for f in frames if id(f) not in in_library and (
        _EVAL_SCRIPT.search(f.file) or (f.function != "<module>" and _EVAL_MODULE.search(f.file)))), None)
    for text, fr in reversed(texts):
        for phase, rx in _STEP:
            if rx.search(text):
                if phase == "forward" and not trains and not training_step and eval_script is not None:
                    # a forward pass in a script named for evaluation, with nothing in the stack
                    # that trains ("eval_knn.py" normalising the features it extracted): evaluating
                    return "eval", eval_script
                return phase, fr
    # nothing in the stack names a phase: a script named for evaluation or inference
    # ("eval_segmentation.py", "predict.py") is evaluating, unless its name says it trains too
    if eval_script is not None:
        return "eval", eval_script
    # the innermost frame is a model's own code ("classification/models/mamba2/ssd_minimal.py",
    # "mmdet/models/dense_heads/..."): a forward pass, unless something constructs or loads
    # (PyTorch's own torch/nn/modules is no model's code; a caller that sets up, builds or
    # loads anything rules it out)
    if frames and not training_step and _MODEL_CODE.search(texts[-1][0]) and not _TORCH_OWN.search(texts[-1][0]) \
            and not any(_NOT_FORWARD.search(fr.function.rsplit(".", 1)[-1]) for fr in frames if fr.function != "<module>"):
        return "forward", frames[-1]
    return None, None
