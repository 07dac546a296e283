// Package model trains the lab's tiny language models on CPU and measures
// their validation loss (the metric of METHOD.md §1 Vocabulary:
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
// Choices the Config fields leave open (library choices): the residual
// connection is added for hidden layers 2..Layers (input width = Hidden);
// init is N(0, (InitScale/√fan_in)²) for weight matrices and N(0,
// InitScale²) for embeddings; weight decay applies to embeddings and weight
// matrices, not biases or norm gains, decoupled for adamw and lion and as an
// L2 term for adam, sgd and momentum; momentum is heavy-ball (v ← β1·v + g);
// the masked-diffusion training loss is the mean NLL over the batch's masked
// positions (the ELBO's 1/t weight is left out, which lowers the variance at
// window 8); training draws t ~ U(0,1] per window. A run diverges when a
// training loss is NaN/Inf, when a block mean of the training loss (after
// the first tenth of the steps) or the validation loss exceeds twice the
// uniform model's (log2 Vocab bits, ln Vocab nats).
//
// Matrix multiplies go through package kernel: pure Go by default, AVX-512
// with GOEXPERIMENT=simd, OpenBLAS with -tags openblas; on the reference
// configurations the backends agree to better than 1e-4 in the loss, but an
// unstable recipe (e.g. a ×10 learning rate) amplifies their different
// rounding, so compare runs within one backend. Train is deterministic: the same (Config, Data,
// seed) gives the same Result bit for bit on one backend.
//
// The package does no I/O and starts no goroutines. Train may be called
// concurrently (runs are parallel across runs, never within one).
package model
