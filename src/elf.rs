//! elf
