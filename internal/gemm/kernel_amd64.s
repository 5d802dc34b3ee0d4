//go:build !noasm

#include "textflag.h"

// The kernels share one shape. SI walks the A panel and DI the B panel, CX
// counts the k steps left, DX points at a row of the C tile and R8 is ldc in
// bytes. In a k step, vector registers 0 and 1 hold the row of the B panel
// (nr is two vectors), register 2 an element of A broadcast, and row i of
// the tile accumulates in registers 8+2i and 9+2i (Z8–Z31 for the 12 rows of
// the AVX-512 kernels) or 4+2i and 5+2i (Y4–Y15, the 6 rows of AVX2). The
// sums are added to C, or stored in it, only after the last step.

// ROWZ and ROWY multiply the B row by A element off(SI) into c0, c1.
#define ROWZ(BCAST, FMA, off, c0, c1) BCAST off(SI), Z2; FMA Z0, Z2, c0; FMA Z1, Z2, c1
#define ROWY(BCAST, FMA, off, c0, c1) BCAST off(SI), Y2; FMA Y0, Y2, c0; FMA Y1, Y2, c1

// STEPZ and STEPY are one k step with E-byte elements, A at ao(SI) and B at
// bo(DI).
#define STEPZ(BCAST, FMA, E, ao, bo) \
	VMOVUPS bo(DI), Z0; VMOVUPS bo+64(DI), Z1; \
	ROWZ(BCAST, FMA, ao+0*E, Z8, Z9); ROWZ(BCAST, FMA, ao+1*E, Z10, Z11); \
	ROWZ(BCAST, FMA, ao+2*E, Z12, Z13); ROWZ(BCAST, FMA, ao+3*E, Z14, Z15); \
	ROWZ(BCAST, FMA, ao+4*E, Z16, Z17); ROWZ(BCAST, FMA, ao+5*E, Z18, Z19); \
	ROWZ(BCAST, FMA, ao+6*E, Z20, Z21); ROWZ(BCAST, FMA, ao+7*E, Z22, Z23); \
	ROWZ(BCAST, FMA, ao+8*E, Z24, Z25); ROWZ(BCAST, FMA, ao+9*E, Z26, Z27); \
	ROWZ(BCAST, FMA, ao+10*E, Z28, Z29); ROWZ(BCAST, FMA, ao+11*E, Z30, Z31)
#define STEPY(BCAST, FMA, E, ao, bo) \
	VMOVUPS bo(DI), Y0; VMOVUPS bo+32(DI), Y1; \
	ROWY(BCAST, FMA, ao+0*E, Y4, Y5); ROWY(BCAST, FMA, ao+1*E, Y6, Y7); \
	ROWY(BCAST, FMA, ao+2*E, Y8, Y9); ROWY(BCAST, FMA, ao+3*E, Y10, Y11); \
	ROWY(BCAST, FMA, ao+4*E, Y12, Y13); ROWY(BCAST, FMA, ao+5*E, Y14, Y15)

// VDPBF16PS Z(b), Z(a), Z(acc) adds to each float32 of acc the products of
// the bfloat16 pair in the same place in a and in b, the high elements'
// first. The Go assembler lacks the instruction, so it is spelled out from
// its encoding, EVEX.512.F3.0F38.W0 52 /r: the byte 0x62; P0 = R̄ X̄ B̄ R̄' 0 0
// 1 0 (map 0F38); P1 = W=0 v̄v̄v̄v̄ 1 1 0 (pp = F3); P2 = z=0 L'L=10 b=0 V̄'
// aaa=000 (512 bits, no mask); the opcode 0x52; ModRM = 11 reg rm. The
// destination acc is reg extended by R (bit 3) and R' (bit 4), the first
// source a is vvvv extended by V' (bit 4), the second source b is rm
// extended by B (bit 3) and X (bit 4); the bars mean inverted bits, and
// 31-x inverts the five bits of register number x. For example
// VDPBF16PS(0, 2, 8) is 62 72 6e 48 52 c0, as GNU as encodes vdpbf16ps
// %zmm0, %zmm2, %zmm8; TestKernels checks the kernel against its loop.
#define VDPBF16PS(b, a, acc) \
	BYTE $0x62; \
	BYTE $((((31-acc)>>3)&1)<<7 | (((31-b)>>4)&1)<<6 | (((31-b)>>3)&1)<<5 | (((31-acc)>>4)&1)<<4 | 0x02); \
	BYTE $(((31-a)&15)<<3 | 0x06); \
	BYTE $(0x40 | (((31-a)>>4)&1)<<3); \
	BYTE $0x52; \
	BYTE $(0xC0 | (acc&7)<<3 | (b&7))

// ROWB and STEPB are ROWZ and STEPZ for pairs of bfloat16, with registers
// by number.
#define ROWB(off, c0, c1) VPBROADCASTD off(SI), Z2; VDPBF16PS(0, 2, c0); VDPBF16PS(1, 2, c1)
#define STEPB(ao, bo) \
	VMOVUPS bo(DI), Z0; VMOVUPS bo+64(DI), Z1; \
	ROWB(ao+0, 8, 9); ROWB(ao+4, 10, 11); ROWB(ao+8, 12, 13); ROWB(ao+12, 14, 15); \
	ROWB(ao+16, 16, 17); ROWB(ao+20, 18, 19); ROWB(ao+24, 20, 21); ROWB(ao+28, 22, 23); \
	ROWB(ao+32, 24, 25); ROWB(ao+36, 26, 27); ROWB(ao+40, 28, 29); ROWB(ao+44, 30, 31)

// The k steps of each kernel, with A at ao(SI) and B at bo(DI).
#define S512(ao, bo) STEPZ(VBROADCASTSS, VFMADD231PS, 4, ao, bo)
#define D512(ao, bo) STEPZ(VBROADCASTSD, VFMADD231PD, 8, ao, bo)
#define S256(ao, bo) STEPY(VBROADCASTSS, VFMADD231PS, 4, ao, bo)
#define D256(ao, bo) STEPY(VBROADCASTSD, VFMADD231PD, 8, ao, bo)

// KLOOP runs STEP CX times, unrolled four times, advancing SI by AS and DI
// by BS bytes a step.
#define KLOOP(STEP, AS, BS) \
	CMPQ CX, $4; \
	JLT  tail; \
loop4: \
	STEP(0, 0); STEP(AS, BS); STEP(2*AS, 2*BS); STEP(3*AS, 3*BS); \
	ADDQ $(4*AS), SI; \
	ADDQ $(4*BS), DI; \
	SUBQ $4, CX; \
	CMPQ CX, $4; \
	JGE  loop4; \
	TESTQ CX, CX; \
	JZ   summed; \
tail: \
	STEP(0, 0); \
	ADDQ $AS, SI; \
	ADDQ $BS, DI; \
	DECQ CX; \
	JNZ  tail; \
summed:

#define ZEROZ \
	VPXORD Z8, Z8, Z8; VPXORD Z9, Z9, Z9; VPXORD Z10, Z10, Z10; VPXORD Z11, Z11, Z11; \
	VPXORD Z12, Z12, Z12; VPXORD Z13, Z13, Z13; VPXORD Z14, Z14, Z14; VPXORD Z15, Z15, Z15; \
	VPXORD Z16, Z16, Z16; VPXORD Z17, Z17, Z17; VPXORD Z18, Z18, Z18; VPXORD Z19, Z19, Z19; \
	VPXORD Z20, Z20, Z20; VPXORD Z21, Z21, Z21; VPXORD Z22, Z22, Z22; VPXORD Z23, Z23, Z23; \
	VPXORD Z24, Z24, Z24; VPXORD Z25, Z25, Z25; VPXORD Z26, Z26, Z26; VPXORD Z27, Z27, Z27; \
	VPXORD Z28, Z28, Z28; VPXORD Z29, Z29, Z29; VPXORD Z30, Z30, Z30; VPXORD Z31, Z31, Z31
#define ZEROY \
	VXORPS Y4, Y4, Y4; VXORPS Y5, Y5, Y5; VXORPS Y6, Y6, Y6; VXORPS Y7, Y7, Y7; \
	VXORPS Y8, Y8, Y8; VXORPS Y9, Y9, Y9; VXORPS Y10, Y10, Y10; VXORPS Y11, Y11, Y11; \
	VXORPS Y12, Y12, Y12; VXORPS Y13, Y13, Y13; VXORPS Y14, Y14, Y14; VXORPS Y15, Y15, Y15

// PREFETCH12 and PREFETCH6 fetch the rows of the C tile, W bytes each,
// while the k steps run.
#define PFROW(W) PREFETCHT0 (AX); PREFETCHT0 W-1(AX); ADDQ R8, AX
#define PREFETCH6(W) PFROW(W); PFROW(W); PFROW(W); PFROW(W); PFROW(W); PFROW(W)
#define PREFETCH12(W) PREFETCH6(W); PREFETCH6(W)

// A kernel ends by adding its accumulators to the h×w part of the C tile,
// h in R9 and w in R10, or by storing them there without reading C if R11
// (add) is 0. A whole tile takes plain loads and stores (ROWADD, ROWSTORE);
// a ragged one takes masked ones, with the columns below w in the masks of
// the two vectors, and stops after h rows (EDGE*), jumping to done.
#define ROWADD(ADD, W, c0, c1) ADD (DX), c0, c0; VMOVUPS c0, (DX); ADD W(DX), c1, c1; VMOVUPS c1, W(DX); ADDQ R8, DX
#define ROWSTORE(ADD, W, c0, c1) VMOVUPS c0, (DX); VMOVUPS c1, W(DX); ADDQ R8, DX
#define EDGEADDZ(ADD, MOV, c0, c1) \
	ADD (DX), c0, K1, c0; MOV c0, K1, (DX); ADD 64(DX), c1, K2, c1; MOV c1, K2, 64(DX); \
	ADDQ R8, DX; DECQ R9; JZ done
#define EDGESTOREZ(ADD, MOV, c0, c1) \
	MOV c0, K1, (DX); MOV c1, K2, 64(DX); \
	ADDQ R8, DX; DECQ R9; JZ done
#define EDGEADDY(MASKMOV, ADD, c0, c1) \
	MASKMOV (DX), Y0, Y2; ADD Y2, c0, c0; MASKMOV c0, Y0, (DX); \
	MASKMOV 32(DX), Y1, Y3; ADD Y3, c1, c1; MASKMOV c1, Y1, 32(DX); \
	ADDQ R8, DX; DECQ R9; JZ done
#define EDGESTOREY(MASKMOV, ADD, c0, c1) \
	MASKMOV c0, Y0, (DX); MASKMOV c1, Y1, 32(DX); \
	ADDQ R8, DX; DECQ R9; JZ done

// TILEZ and TILEY run ROW(X, Y, c0, c1) on the accumulators of each row of
// the tile in turn.
#define TILEZ(ROW, X, Y) \
	ROW(X, Y, Z8, Z9); ROW(X, Y, Z10, Z11); ROW(X, Y, Z12, Z13); ROW(X, Y, Z14, Z15); \
	ROW(X, Y, Z16, Z17); ROW(X, Y, Z18, Z19); ROW(X, Y, Z20, Z21); ROW(X, Y, Z22, Z23); \
	ROW(X, Y, Z24, Z25); ROW(X, Y, Z26, Z27); ROW(X, Y, Z28, Z29); ROW(X, Y, Z30, Z31)
#define TILEY(ROW, X, Y) \
	ROW(X, Y, Y4, Y5); ROW(X, Y, Y6, Y7); ROW(X, Y, Y8, Y9); \
	ROW(X, Y, Y10, Y11); ROW(X, Y, Y12, Y13); ROW(X, Y, Y14, Y15)

// ENDZ ends an AVX-512 kernel with L lanes a vector, stored by MOV (masked
// stores mask lanes of the size MOV moves): K1 and K2 get the low and high
// L bits of 1<<w - 1.
#define ENDZ(ADD, MOV, L) \
	CMPQ R9, $12; JNE edge; CMPQ R10, $(2*L); JNE edge; \
	TESTQ R11, R11; JZ store; \
	TILEZ(ROWADD, ADD, 64); JMP done; \
store: \
	TILEZ(ROWSTORE, ADD, 64); JMP done; \
edge: \
	MOVQ R10, CX; MOVQ $1, AX; SHLQ CX, AX; DECQ AX; \
	KMOVW AX, K1; SHRQ $L, AX; KMOVW AX, K2; \
	TESTQ R11, R11; JZ edgestore; \
	TILEZ(EDGEADDZ, ADD, MOV); \
edgestore: \
	TILEZ(EDGESTOREZ, ADD, MOV); \
done: \
	VZEROUPPER; \
	RET

// ENDY ends an AVX2 kernel with E-byte elements, 32/E lanes a vector: the
// masks in Y0 and Y1 are read from edgeMask, 2·32/E elements of E bytes
// (all ones) and then as many zeros, starting 2·32/E-w elements in.
#define ENDY(MASKMOV, ADD, E) \
	CMPQ R9, $6; JNE edge; CMPQ R10, $(64/E); JNE edge; \
	TESTQ R11, R11; JZ store; \
	TILEY(ROWADD, ADD, 32); JMP done; \
store: \
	TILEY(ROWSTORE, ADD, 32); JMP done; \
edge: \
	LEAQ edgeMask<>(SB), AX; MOVQ $(64/E), BX; SUBQ R10, BX; \
	VMOVDQU (AX)(BX*E), Y0; VMOVDQU 32(AX)(BX*E), Y1; \
	TESTQ R11, R11; JZ edgestore; \
	TILEY(EDGEADDY, MASKMOV, ADD); \
edgestore: \
	TILEY(EDGESTOREY, MASKMOV, ADD); \
done: \
	VZEROUPPER; \
	RET

DATA edgeMask<>+0(SB)/8, $-1
DATA edgeMask<>+8(SB)/8, $-1
DATA edgeMask<>+16(SB)/8, $-1
DATA edgeMask<>+24(SB)/8, $-1
DATA edgeMask<>+32(SB)/8, $-1
DATA edgeMask<>+40(SB)/8, $-1
DATA edgeMask<>+48(SB)/8, $-1
DATA edgeMask<>+56(SB)/8, $-1
GLOBL edgeMask<>(SB), RODATA|NOPTR, $128

// func sgemmAVX512(kc int, a, b, c []float32, ldc, h, w int, add bool)
TEXT ·sgemmAVX512(SB), NOSPLIT, $0-105
	MOVQ kc+0(FP), CX
	MOVQ a_base+8(FP), SI
	MOVQ b_base+32(FP), DI
	MOVQ c_base+56(FP), DX
	MOVQ ldc+80(FP), R8
	MOVQ h+88(FP), R9
	MOVQ w+96(FP), R10
	MOVBQZX add+104(FP), R11
	SHLQ $2, R8
	MOVQ DX, AX
	PREFETCH12(128)
	ZEROZ
	KLOOP(S512, 48, 128)
	ENDZ(VADDPS, VMOVUPS, 16)

// func dgemmAVX512(kc int, a, b, c []float64, ldc, h, w int, add bool)
TEXT ·dgemmAVX512(SB), NOSPLIT, $0-105
	MOVQ kc+0(FP), CX
	MOVQ a_base+8(FP), SI
	MOVQ b_base+32(FP), DI
	MOVQ c_base+56(FP), DX
	MOVQ ldc+80(FP), R8
	MOVQ h+88(FP), R9
	MOVQ w+96(FP), R10
	MOVBQZX add+104(FP), R11
	SHLQ $3, R8
	MOVQ DX, AX
	PREFETCH12(128)
	ZEROZ
	KLOOP(D512, 96, 128)
	ENDZ(VADDPD, VMOVUPD, 8)

// func bf16gemmAVX512(kc int, a, b, c []float32, ldc, h, w int, add bool)
TEXT ·bf16gemmAVX512(SB), NOSPLIT, $0-105
	MOVQ kc+0(FP), CX
	MOVQ a_base+8(FP), SI
	MOVQ b_base+32(FP), DI
	MOVQ c_base+56(FP), DX
	MOVQ ldc+80(FP), R8
	MOVQ h+88(FP), R9
	MOVQ w+96(FP), R10
	MOVBQZX add+104(FP), R11
	SHLQ $2, R8
	MOVQ DX, AX
	PREFETCH12(128)
	ZEROZ
	KLOOP(STEPB, 48, 128)
	ENDZ(VADDPS, VMOVUPS, 16)

// FTZON sets MXCSR's FTZ and DAZ bits for the k steps of a widen kernel,
// keeping the caller's MXCSR at 0(SP) for FTZOFF to restore before C is
// touched (its additions run as Go's do).
#define FTZON STMXCSR 0(SP); MOVL 0(SP), AX; ORL $0x8040, AX; MOVL AX, 4(SP); LDMXCSR 4(SP)
#define FTZOFF LDMXCSR 0(SP)

// func sgemmFTZAVX512(kc int, a, b, c []float32, ldc, h, w int, add bool)
TEXT ·sgemmFTZAVX512(SB), NOSPLIT, $8-105
	MOVQ kc+0(FP), CX
	MOVQ a_base+8(FP), SI
	MOVQ b_base+32(FP), DI
	MOVQ c_base+56(FP), DX
	MOVQ ldc+80(FP), R8
	MOVQ h+88(FP), R9
	MOVQ w+96(FP), R10
	MOVBQZX add+104(FP), R11
	SHLQ $2, R8
	FTZON
	MOVQ DX, AX
	PREFETCH12(128)
	ZEROZ
	KLOOP(S512, 48, 128)
	FTZOFF
	ENDZ(VADDPS, VMOVUPS, 16)

// func sgemmFTZAVX2(kc int, a, b, c []float32, ldc, h, w int, add bool)
TEXT ·sgemmFTZAVX2(SB), NOSPLIT, $8-105
	MOVQ kc+0(FP), CX
	MOVQ a_base+8(FP), SI
	MOVQ b_base+32(FP), DI
	MOVQ c_base+56(FP), DX
	MOVQ ldc+80(FP), R8
	MOVQ h+88(FP), R9
	MOVQ w+96(FP), R10
	MOVBQZX add+104(FP), R11
	SHLQ $2, R8
	FTZON
	MOVQ DX, AX
	PREFETCH6(64)
	ZEROY
	KLOOP(S256, 24, 64)
	FTZOFF
	ENDY(VMASKMOVPS, VADDPS, 4)

// func sgemmAVX2(kc int, a, b, c []float32, ldc, h, w int, add bool)
TEXT ·sgemmAVX2(SB), NOSPLIT, $0-105
	MOVQ kc+0(FP), CX
	MOVQ a_base+8(FP), SI
	MOVQ b_base+32(FP), DI
	MOVQ c_base+56(FP), DX
	MOVQ ldc+80(FP), R8
	MOVQ h+88(FP), R9
	MOVQ w+96(FP), R10
	MOVBQZX add+104(FP), R11
	SHLQ $2, R8
	MOVQ DX, AX
	PREFETCH6(64)
	ZEROY
	KLOOP(S256, 24, 64)
	ENDY(VMASKMOVPS, VADDPS, 4)

// func dgemmAVX2(kc int, a, b, c []float64, ldc, h, w int, add bool)
TEXT ·dgemmAVX2(SB), NOSPLIT, $0-105
	MOVQ kc+0(FP), CX
	MOVQ a_base+8(FP), SI
	MOVQ b_base+32(FP), DI
	MOVQ c_base+56(FP), DX
	MOVQ ldc+80(FP), R8
	MOVQ h+88(FP), R9
	MOVQ w+96(FP), R10
	MOVBQZX add+104(FP), R11
	SHLQ $3, R8
	MOVQ DX, AX
	PREFETCH6(64)
	ZEROY
	KLOOP(D256, 48, 64)
	ENDY(VMASKMOVPD, VADDPD, 8)
