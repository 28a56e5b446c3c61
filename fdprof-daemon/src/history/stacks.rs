//! Each distinct stack of the kept intervals once: the same stacks recur interval after
//! interval, and their frames are most of an interval's size.

use std::collections::HashMap;

use fdprof_recording::{Recording, recording::Frame};

/// Each distinct stack once, with how many kept sites name it.
#[derive(Debug, Clone, Default)]
pub(super) struct Stacks {
    pub(super) ids: HashMap<Vec<Frame>, u32>,
    /// By id: the frames and their count of users; `None` once free.
    table: Vec<Option<(Vec<Frame>, usize)>>,
    free: Vec<u32>,
}

impl Stacks {
    pub(super) fn intern(&mut self, frames: Vec<Frame>) -> u32 {
        if let Some(&id) = self.ids.get(&frames) {
            if let Some((_, users)) = &mut self.table[id as usize] {
                *users += 1;
            }
            return id;
        }
        let id = match self.free.pop() {
            Some(id) => id,
            None => {
                self.table.push(None);
                (self.table.len() - 1) as u32
            }
        };
        self.ids.insert(frames.clone(), id);
        self.table[id as usize] = Some((frames, 1));
        id
    }

    pub(super) fn release(&mut self, id: u32) {
        let slot = &mut self.table[id as usize];
        if let Some((frames, users)) = slot {
            *users -= 1;
            if *users == 0 {
                self.ids.remove(frames);
                *slot = None;
                self.free.push(id);
            }
        }
    }

    pub(super) fn frames(&self, id: u32) -> Vec<Frame> {
        self.table[id as usize]
            .as_ref()
            .map(|(frames, _)| frames.clone())
            .unwrap_or_default()
    }

    /// The stack `id` as one frame that only names it (none for an empty stack): sites and
    /// samples added up by these match as by their frames, at the cost of one frame each.
    pub(super) fn stand_in(&self, id: u32) -> Vec<Frame> {
        match &self.table[id as usize] {
            Some((frames, _)) if !frames.is_empty() => vec![Frame {
                offset: u64::from(id),
                ..Frame::default()
            }],
            _ => Vec::new(),
        }
    }

    /// The frames a [`Stacks::stand_in`] stands for.
    fn put_back(&self, stack: &mut Vec<Frame>) {
        if let [f] = stack.as_slice() {
            *stack = self.frames(f.offset as u32);
        }
    }

    /// The frames of every stand-in in `rec`, whose every stack is one (or empty).
    pub(super) fn put_back_all(&self, rec: &mut Recording) {
        for site in &mut rec.contention {
            self.put_back(&mut site.kernel_stack);
            self.put_back(&mut site.user_stack);
        }
        for sample in rec.cpu.iter_mut().flat_map(|p| &mut p.samples) {
            self.put_back(&mut sample.kernel_stack);
            self.put_back(&mut sample.user_stack);
        }
    }
}
