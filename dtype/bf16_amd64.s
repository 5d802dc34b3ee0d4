//go:build !noasm

#include "textflag.h"

// The kernels convert sixteen elements an iteration: SI walks src, DI walks
// dst and CX counts the blocks of sixteen. They end with VZEROUPPER, as the
// Z registers they dirty would slow later SSE code.

// func encodeBF16AVX512(dst []uint16, src []float32, lim float32)
TEXT ·encodeBF16AVX512(SB), NOSPLIT, $0-52
	MOVQ         dst_base+0(FP), DI
	MOVQ         src_base+24(FP), SI
	MOVQ         src_len+32(FP), CX
	VBROADCASTSS lim+48(FP), Z4
	MOVL         $0x80000000, AX
	VPBROADCASTD AX, Z5
	VPXORD       Z4, Z5, Z5       // -lim
	MOVL         $1, AX
	VPBROADCASTD AX, Z6
	MOVL         $0x7fff, AX
	VPBROADCASTD AX, Z7
	MOVL         $0x40, AX
	VPBROADCASTD AX, Z8
	SHRQ         $4, CX
	JZ           done

loop:
	VMOVDQU32 (SI), Z0
	// clamp(x, lim): VMINPS and VMAXPS return their second Intel source,
	// here x, when the comparison fails, so NaN passes through like
	// clamp's switch; the Go order is the reverse of Intel's.
	VMINPS    Z0, Z4, Z0
	VMAXPS    Z0, Z5, Z0
	VCMPPS    $3, Z0, Z0, K1  // unordered: the NaN lanes
	VPSRLD    $16, Z0, Z2     // b>>16
	VPANDD    Z6, Z2, Z3
	VPADDD    Z0, Z3, Z3
	VPADDD    Z7, Z3, Z3
	VPSRLD    $16, Z3, Z3     // (b + 0x7fff + b>>16&1) >> 16
	VPORD     Z8, Z2, K1, Z3  // NaN lanes: b>>16 | 0x40
	VPMOVDW   Z3, (DI)
	ADDQ      $64, SI
	ADDQ      $32, DI
	DECQ      CX
	JNZ       loop

done:
	VZEROUPPER
	RET

// func decodeBF16AVX512(dst []float32, src []uint16)
TEXT ·decodeBF16AVX512(SB), NOSPLIT, $0-48
	MOVQ dst_base+0(FP), DI
	MOVQ src_base+24(FP), SI
	MOVQ src_len+32(FP), CX
	SHRQ $4, CX
	JZ   done

loop:
	VPMOVZXWD (SI), Z0
	VPSLLD    $16, Z0, Z0
	VMOVDQU32 Z0, (DI)
	ADDQ      $32, SI
	ADDQ      $64, DI
	DECQ      CX
	JNZ       loop

done:
	VZEROUPPER
	RET
