// Package model trains the lab's tiny language models on CPU and measures
// their validation loss (issue 4; the metric of METHOD.md §1 Vocabulary:
// bits per byte for autoregressive families, nats per masked token for
// diffusion families).
//
// A model is a byte-level MLP LM: one embedding per window position,
// concatenated, then Layers hidden layers (x·W + b, optional layernorm or
// rmsnorm, activation tanh, relu, gelu or silu, dropout, optional residual
// between equal-width hidden layers), then a softmax over Vocab symbols for
// each predicted position. Three objectives share it (see Objective):
// next-symbol prediction, a masked-diffusion objective with a random mask
// rate per window and a mask symbol (index Vocab), and a centre-masked
// variant. Forward and backward passes are written by hand and checked
// against finite differences. Optimisers (adam, adamw, sgd, momentum, lion),
// schedules (constant, cosine, linear, wsd with warm-up), weight decay,
// global-norm clipping, label smoothing and init scale are all in Config.
//
// Matrix multiplies go through package kernel: pure Go by default, AVX-512
// with GOEXPERIMENT=simd, OpenBLAS with -tags openblas; the backends agree to
// about 1e-4 in the loss. Train is deterministic: the same (Config, Data,
// seed) gives the same Result bit for bit on one backend.
//
// The package does no I/O and starts no goroutines. Train may be called
// concurrently (runs are parallel across runs, never within one).
package model
