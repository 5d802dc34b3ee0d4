//go:build !noasm

#include "textflag.h"

// addAVX512 takes 64 elements an iteration while it can (four independent
// adds keep the load ports busy), then sixteen; CX counts the elements left.

// func addAVX512(dst, x []float32)
TEXT ·addAVX512(SB), NOSPLIT, $0-48
	MOVQ dst_base+0(FP), DI
	MOVQ dst_len+8(FP), CX
	MOVQ x_base+24(FP), SI

add64:
	CMPQ    CX, $64
	JLT     add16
	VMOVUPS (DI), Z0
	VMOVUPS 64(DI), Z1
	VMOVUPS 128(DI), Z2
	VMOVUPS 192(DI), Z3
	VADDPS  (SI), Z0, Z0
	VADDPS  64(SI), Z1, Z1
	VADDPS  128(SI), Z2, Z2
	VADDPS  192(SI), Z3, Z3
	VMOVUPS Z0, (DI)
	VMOVUPS Z1, 64(DI)
	VMOVUPS Z2, 128(DI)
	VMOVUPS Z3, 192(DI)
	ADDQ    $256, SI
	ADDQ    $256, DI
	SUBQ    $64, CX
	JMP     add64

add16:
	CMPQ    CX, $16
	JLT     addDone
	VMOVUPS (DI), Z0
	VADDPS  (SI), Z0, Z0
	VMOVUPS Z0, (DI)
	ADDQ    $64, SI
	ADDQ    $64, DI
	SUBQ    $16, CX
	JMP     add16

addDone:
	VZEROUPPER
	RET
