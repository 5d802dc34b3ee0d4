//go:build !noasm

#include "textflag.h"

// ROUND(x, k) rounds the lanes of x to bfloat16 where k is set (k is all
// set or all clear: whether the tensor x is written to is bfloat16), as
// roundBF16If does on the float32 bits rather than with VCVTNEPS2BF16,
// which flushes subnormals: b + 0x7fff + b>>16&1, or b | 0x400000 in the
// NaN lanes (K1), then the low half cleared. Z15 is scratch; Z16–Z19 hold
// 1, 0x7fff, 0x400000 and 0xffff0000.
#define ROUND(x, k) \
	VCMPPS $3, x, x, K1; \
	VPSRLD $16, x, Z15; \
	VPANDD Z16, Z15, Z15; \
	VPADDD x, Z15, Z15; \
	VPADDD Z17, Z15, Z15; \
	VPORD  Z18, x, K1, Z15; \
	VPANDD Z19, Z15, k, x

// func adamWBF16AVX512(p, g, m, v []float32, s AdamWParams, roundP, roundM, roundV bool)
//
// adamWAVX512 (adamw_amd64.s) with the same registers, each result that
// adamWRange rounds passed through ROUND with the mask of the tensor it
// writes: K2 for p, K3 for m, K4 for v and d.
TEXT ·adamWBF16AVX512(SB), NOSPLIT, $0-127
	MOVQ         p_base+0(FP), DI
	MOVQ         p_len+8(FP), CX
	MOVQ         g_base+24(FP), SI
	MOVQ         m_base+48(FP), R8
	MOVQ         v_base+72(FP), R9
	VBROADCASTSS s_Decay+96(FP), Z8
	VBROADCASTSS s_Lerp+100(FP), Z9
	VBROADCASTSS s_Beta2+104(FP), Z10
	VBROADCASTSS s_OneMinusBeta2+108(FP), Z11
	VBROADCASTSS s_BC2Sqrt+112(FP), Z12
	VBROADCASTSS s_Eps+116(FP), Z13
	VBROADCASTSS s_NegStep+120(FP), Z14
	MOVBLZX      roundP+124(FP), AX
	NEGL         AX                    // true: all bits set
	KMOVW        AX, K2
	MOVBLZX      roundM+125(FP), AX
	NEGL         AX
	KMOVW        AX, K3
	MOVBLZX      roundV+126(FP), AX
	NEGL         AX
	KMOVW        AX, K4
	MOVL         $1, AX
	VPBROADCASTD AX, Z16
	MOVL         $0x7fff, AX
	VPBROADCASTD AX, Z17
	MOVL         $0x00400000, AX
	VPBROADCASTD AX, Z18
	MOVL         $0xffff0000, AX
	VPBROADCASTD AX, Z19
	SHRQ         $4, CX
	JZ           done

loop:
	VMOVUPS (DI), Z0 // p
	VMOVUPS (SI), Z1 // g
	VMOVUPS (R8), Z2 // m
	VMOVUPS (R9), Z3 // v
	VMULPS  Z8, Z0, Z0   // p = p·decay
	ROUND(Z0, K2)
	VSUBPS  Z2, Z1, Z4   // g - m
	VMULPS  Z4, Z9, Z4   // lerp·(g-m)
	VADDPS  Z4, Z2, Z2   // m = m + lerp·(g-m)
	ROUND(Z2, K3)
	VMULPS  Z10, Z3, Z3  // v = v·β2
	ROUND(Z3, K4)
	VMULPS  Z1, Z11, Z5  // (1-β2)·g
	VMULPS  Z1, Z5, Z5   // (1-β2)·g·g
	VADDPS  Z5, Z3, Z3   // v = v + (1-β2)·g·g
	ROUND(Z3, K4)
	VSQRTPS Z3, Z5       // d = sqrt(v)
	ROUND(Z5, K4)
	VDIVPS  Z12, Z5, Z5  // d = d/bc2sqrt
	ROUND(Z5, K4)
	VADDPS  Z13, Z5, Z5  // d = d + eps
	ROUND(Z5, K4)
	VDIVPS  Z5, Z2, Z6   // m/d
	VMULPS  Z6, Z14, Z6  // negStep·(m/d)
	VADDPS  Z6, Z0, Z0   // p = p + negStep·(m/d)
	ROUND(Z0, K2)
	VMOVUPS Z0, (DI)
	VMOVUPS Z2, (R8)
	VMOVUPS Z3, (R9)
	ADDQ    $64, DI
	ADDQ    $64, SI
	ADDQ    $64, R8
	ADDQ    $64, R9
	DECQ    CX
	JNZ     loop

done:
	VZEROUPPER
	RET
