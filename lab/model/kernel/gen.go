package kernel

//go:generate sh -c "cd internal/asmgen && go run . -out ../asm/gemm_amd64.s -stubs ../asm/gemm_amd64.go -pkg asm"
