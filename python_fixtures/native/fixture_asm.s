# long fixture_asm_block(int fd): calls fixture_block(fd) the way hand-written
# kernels (OpenBLAS) do: no CFI directives at all, so no .eh_frame entry, and
# rbp overwritten with a non-pointer while the call is in progress.
    .text
    .globl  fixture_asm_block
    .type   fixture_asm_block, @function
fixture_asm_block:
    push    %rbp
    push    %rbx
    mov     $0x1234, %rbp
    sub     $40, %rsp
    movq    $0, 8(%rsp)
    call    fixture_block@PLT
    add     $40, %rsp
    add     %rbp, %rax
    sub     $0x1234, %rax
    pop     %rbx
    pop     %rbp
    ret
    .size   fixture_asm_block, .-fixture_asm_block
    .section .note.GNU-stack,"",@progbits
