//! Frames named: from the symbol tables while unwinding ([`NativeUnwinder::frame`]),
//! and for the frames that get printed, DWARF file:line and inlined
//! frames, tail-call frames from call-site records, and JIT code's names
//! ([`NativeUnwinder::add_lines`], [`NativeUnwinder::tail_calls_between`]).

use std::sync::Arc;

use super::{cuda_tag, jit, LoadState, NativeFrame, NativeUnwinder, UnwindMethod};

impl NativeUnwinder {
    /// A frame for `ip`, named from the symbol tables only.
    pub(super) fn frame(
        &mut self,
        ip: u64,
        return_address: bool,
        how: UnwindMethod,
    ) -> NativeFrame {
        let lookup = if return_address {
            ip.saturating_sub(1)
        } else {
            ip
        };
        let mut f = NativeFrame {
            ip,
            function: None,
            range_start: None,
            module: String::new(),
            module_path: String::new(),
            offset: ip,
            file: None,
            line: None,
            inlined: false,
            tail_call: false,
            tag: None,
            how,
            exported: false,
            return_address,
            sp: 0,
            cfa: 0,
        };
        if let Some(i) = self.module_for(lookup) {
            f.module = self.modules[i].name.clone();
            f.module_path = self.modules[i].path.clone();
            f.tag = cuda_tag(&f.module);
            let start = self.modules[i].start;
            match self.loaded(i) {
                Some(lm) => {
                    let bias = lm.bias;
                    f.offset = ip.wrapping_sub(bias);
                    let svma = lookup.wrapping_sub(bias);
                    if let Some((name, exported)) = lm.symbol(svma) {
                        f.function = Some(name.to_string());
                        f.exported = exported;
                    } else {
                        f.range_start = lm.cfi_start(svma);
                    }
                }
                None => f.offset = ip - start,
            }
        } else if let Some(m) = self.mapping(lookup) {
            f.module = if m.path.is_empty() {
                "[anon]".to_string()
            } else {
                m.path.clone()
            };
            f.module_path = m.path.clone();
            f.offset = ip - m.start;
        } else {
            f.module = "[unknown]".to_string();
        }
        f
    }

    /// The frames of functions that tail-called their way from `caller`
    /// (the next frame out of `callee`, from [`unwind`](Self::unwind)) to
    /// `callee`, innermost first, where DWARF call-site records prove them,
    /// as gdb does: when the caller's return address is a call site calling
    /// G while the callee runs in another function H, and the tail-call
    /// sites from G give exactly one chain G -> ... -> H, the functions of
    /// that chain (`tail_call` set). Only where DWARF is read for file:line
    /// anyway (the module's own, or its debug file's with
    /// [`set_debug_file_lines`](Self::set_debug_file_lines)); a direct call
    /// to H itself is told from the code's bytes without DWARF. Cached per
    /// pair of addresses.
    pub fn tail_calls_between(
        &mut self,
        callee: &NativeFrame,
        caller: &NativeFrame,
    ) -> Arc<[NativeFrame]> {
        if !caller.return_address || callee.tail_call || caller.tail_call {
            return Arc::from(Vec::new());
        }
        let key = (caller.ip, callee.lookup_ip());
        let found = match self.tail_cache.get(&key) {
            Some(f) => f.clone(),
            None => {
                // Most pairs have none: cached as None, with no allocation.
                let f = self
                    .find_tail_frames(callee, caller)
                    .filter(|f| !f.is_empty())
                    .map(Arc::from);
                self.tail_cache.insert(key, f.clone());
                f
            }
        };
        found.unwrap_or_else(|| Arc::from(Vec::new()))
    }

    fn find_tail_frames(
        &mut self,
        callee: &NativeFrame,
        caller: &NativeFrame,
    ) -> Option<Vec<NativeFrame>> {
        let debug_files = self.debug_file_lines;
        let ci = self.find_module(caller.lookup_ip())?;
        let hi = self.find_module(callee.lookup_ip())?;
        // H: the function the callee's frame runs.
        let h_lm = self.loaded(hi)?;
        let h_bias = h_lm.bias;
        let h = h_lm.function_start(callee.lookup_ip().wrapping_sub(h_bias))?;
        // A direct call to H itself (what most frames are), told from the
        // code without DWARF: no tail call in between. So is a call to
        // H's PLT stub from another library.
        let c_lm = self.loaded(ci)?;
        // Without the caller's DWARF there are no call-site records to
        // find a chain in: nothing more to look at (and no need to index a
        // big library's names for the stub check below).
        if !c_lm.may_have_lines(debug_files) {
            return None;
        }
        let ret = caller.ip.wrapping_sub(c_lm.bias);
        let called = c_lm.direct_call_target(ret);
        if ci == hi && called == Some(h) {
            return None;
        }
        let stub = called
            .filter(|_| ci != hi)
            .and_then(|t| c_lm.symbol(t))
            .and_then(|(n, _)| n.strip_suffix("@plt").map(str::to_string));
        if let Some(name) = stub {
            if self.loaded(hi)?.exported_function(&name) == Some(h) {
                return None;
            }
        }
        // G: what the caller's call site calls.
        let c_lm = self.loaded(ci)?;
        let site = c_lm.call_site(caller.ip.wrapping_sub(c_lm.bias), debug_files)?;
        if site.tail {
            return None;
        }
        let target = site.target?;
        let g = match c_lm.resolve_target(&target, debug_files) {
            Some(g) if ci == hi => g,
            Some(_) => return None,
            // A declaration of a function in another library: the callee's,
            // if that is where it is defined (the C library's
            // `pthread_mutex_unlock`, which tail-calls its internals).
            None if ci != hi => {
                let name = c_lm.target_name(&target, debug_files)?;
                self.loaded(hi)?.exported_function(&name)?
            }
            None => return None,
        };
        let chain = self.loaded(hi)?.tail_chain(g, h, debug_files)?;
        let mut out = Vec::with_capacity(chain.len());
        for &ret in chain.iter().rev() {
            let mut f = self.frame(ret.wrapping_add(h_bias), true, callee.how);
            // Named as gdb names it: by the innermost function at the jump,
            // which may be one inlined into the function that jumped.
            let lines = self.loaded(hi)?.lines(ret.wrapping_sub(1), debug_files);
            if let Some(l) = lines.first() {
                // The function itself keeps the symbol table's name, as
                // add_lines keeps it.
                if l.function.is_some() && (l.inlined || f.function.is_none()) {
                    f.function = l.function.clone();
                    f.exported = false;
                }
                f.file = l.file.clone();
                f.line = l.line;
            }
            f.tail_call = true;
            // No stack of its own: an empty range at the callee's end.
            f.sp = callee.cfa;
            f.cfa = callee.cfa;
            out.push(f);
        }
        Some(out)
    }

    /// Expand a frame from [`unwind`](Self::unwind) with DWARF file:line and
    /// the functions inlined at that point (innermost first). Cached per
    /// address; DWARF is parsed on first use per module. A frame without
    /// DWARF comes back unchanged.
    pub fn add_lines(&mut self, frame: &NativeFrame) -> Vec<NativeFrame> {
        let lookup = frame.lookup_ip();
        let debug_files = self.debug_file_lines;
        let lines = match self.find_module(lookup) {
            Some(i) => match self.loaded(i) {
                Some(lm) => {
                    let svma = lookup.wrapping_sub(lm.bias);
                    lm.lines(svma, debug_files)
                }
                None => return vec![frame.clone()],
            },
            None => return vec![self.jit_frame(frame)],
        };
        if lines.is_empty() {
            return vec![frame.clone()];
        }
        lines
            .iter()
            .map(|l| {
                let mut f = frame.clone();
                f.file = l.file.clone();
                f.line = l.line;
                f.inlined = l.inlined;
                // The outermost entry is the real function: keep the symbol
                // table's name (what merging classified) when there is one.
                if l.inlined || f.function.is_none() {
                    f.function = l.function.clone().or(f.function);
                }
                if l.inlined {
                    f.exported = false;
                }
                f
            })
            .collect()
    }

    /// `frame`, named from the target's JIT interface when it is code
    /// outside every file that a JIT announced there (see [`jit`]). The
    /// modules loaded so far (those on the stacks unwound) are searched
    /// for the JIT's descriptor, each once.
    fn jit_frame(&mut self, frame: &NativeFrame) -> NativeFrame {
        let mut f = frame.clone();
        if f.function.is_some() || f.module != "[anon]" {
            return f;
        }
        for m in &self.modules {
            let key = (m.start, m.inode);
            if let LoadState::Loaded(lm) = &m.state {
                if self.jit.wants_module(key) {
                    let d = lm
                        .data_symbol(jit::DESCRIPTOR, jit::DESCRIPTOR_SIZE)
                        .map(|svma| svma.wrapping_add(lm.bias));
                    self.jit.searched_module(key, d);
                }
            }
        }
        if let Some(name) = self.jit.name(&*self.source, f.lookup_ip()) {
            f.function = Some(name.to_string());
            f.module = "[jit]".to_string();
        }
        f
    }
}
