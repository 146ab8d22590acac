"""GPT-2 in MindNLP's style (mindnlp/transformers/models/gpt2/modeling_gpt2.py), trimmed to inference.

MindNLP 0.5.1 no longer ships a MindSpore GPT-2 of its own (it runs Hugging Face's through its
torch layer, mindtorch), so its package cannot be imported under msvm's alias; this file writes
the same Cells again on ``mindspore.nn``/``mindspore.ops``, keeping the source's structure and
idioms: Conv1D (``ops.addmm`` over the flattened input), the boolean causal table
``ops.tril(ops.ones((n, n), dtype=mindspore.bool_)).view(1, 1, n, n)`` sliced as
``self.bias[:, :, key_length - query_length : key_length, :key_length]``, the mask value
``float(np.finfo(mindspore.dtype_to_nptype(attn_weights.dtype)).min)`` through ``ops.full``,
``split(self.split_size, axis=2)``, ``view``/``permute``/``swapaxes``, ``hasattr(self, ...)``,
``ops.arange`` positions and the (1 - mask) * min extended attention mask. Left out: past key
values, cross attention's weights, head masks, dropout in training, the LM head.
"""

import math

import mindspore
import numpy as np
from mindspore import Parameter, nn, ops
from mindspore.common.initializer import Normal, initializer


class GPT2Config:
    def __init__(self, vocab_size=50257, n_positions=1024, n_embd=768, n_layer=12, n_head=12, n_inner=None,
                 activation_function="gelu_new", resid_pdrop=0.1, embd_pdrop=0.1, attn_pdrop=0.1,
                 layer_norm_epsilon=1e-5, initializer_range=0.02, scale_attn_weights=True,
                 scale_attn_by_inverse_layer_idx=False, reorder_and_upcast_attn=False, add_cross_attention=False):
        self.vocab_size = vocab_size
        self.max_position_embeddings = n_positions
        self.hidden_size = n_embd
        self.n_layer = n_layer
        self.num_attention_heads = n_head
        self.n_inner = n_inner
        self.activation_function = activation_function
        self.resid_pdrop, self.embd_pdrop, self.attn_pdrop = resid_pdrop, embd_pdrop, attn_pdrop
        self.layer_norm_epsilon = layer_norm_epsilon
        self.initializer_range = initializer_range
        self.scale_attn_weights = scale_attn_weights
        self.scale_attn_by_inverse_layer_idx = scale_attn_by_inverse_layer_idx
        self.reorder_and_upcast_attn = reorder_and_upcast_attn
        self.add_cross_attention = add_cross_attention


class NewGELUActivation(nn.Cell):
    """The tanh GELU of the GPT-2 code (ACT2FN['gelu_new'])."""

    def construct(self, input):
        return 0.5 * input * (1.0 + ops.tanh(math.sqrt(2.0 / math.pi) * (input + 0.044715 * ops.pow(input, 3.0))))


ACT2FN = {"gelu_new": NewGELUActivation}


class Conv1D(nn.Cell):
    """A linear layer with the weight stored transposed ([nx, nf]), as GPT-2 keeps it."""

    def __init__(self, nf, nx):
        super().__init__()
        self.nf = nf
        self.weight = Parameter(initializer(Normal(sigma=0.02), (nx, nf), mindspore.float32), "weight")
        self.bias = Parameter(initializer("zeros", nf, mindspore.float32), "bias")

    def construct(self, x):
        size_out = x.shape[:-1] + (self.nf,)
        x = ops.addmm(self.bias, x.view(-1, x.shape[-1]), self.weight)
        x = x.view(size_out)
        return x


class GPT2Attention(nn.Cell):
    def __init__(self, config, is_cross_attention=False, layer_idx=None):
        super().__init__()
        max_positions = config.max_position_embeddings
        self.bias = ops.tril(ops.ones((max_positions, max_positions), dtype=mindspore.bool_)).view(
            1, 1, max_positions, max_positions)
        self.masked_bias = mindspore.Tensor(-1e4)
        self.embed_dim = config.hidden_size
        self.num_heads = config.num_attention_heads
        self.head_dim = self.embed_dim // self.num_heads
        self.split_size = self.embed_dim
        if self.head_dim * self.num_heads != self.embed_dim:
            raise ValueError(f"`embed_dim` must be divisible by num_heads (got `embed_dim`: {self.embed_dim} and "
                             f"`num_heads`: {self.num_heads}).")
        self.scale_attn_weights = config.scale_attn_weights
        self.is_cross_attention = is_cross_attention
        self.scale_attn_by_inverse_layer_idx = config.scale_attn_by_inverse_layer_idx
        self.layer_idx = layer_idx
        self.reorder_and_upcast_attn = config.reorder_and_upcast_attn
        if self.is_cross_attention:
            self.c_attn = Conv1D(2 * self.embed_dim, self.embed_dim)
            self.q_attn = Conv1D(self.embed_dim, self.embed_dim)
        else:
            self.c_attn = Conv1D(3 * self.embed_dim, self.embed_dim)
        self.c_proj = Conv1D(self.embed_dim, self.embed_dim)
        self.attn_dropout = nn.Dropout(p=config.attn_pdrop)
        self.resid_dropout = nn.Dropout(p=config.resid_pdrop)

    def _attn(self, query, key, value, attention_mask=None, head_mask=None):
        attn_weights = ops.matmul(query, key.swapaxes(-1, -2))
        if self.scale_attn_weights:
            attn_weights = attn_weights / ops.full([], value.shape[-1] ** 0.5, dtype=attn_weights.dtype)
        if self.scale_attn_by_inverse_layer_idx:
            attn_weights = attn_weights / float(self.layer_idx + 1)
        if not self.is_cross_attention:
            query_length, key_length = query.shape[-2], key.shape[-2]
            causal_mask = self.bias[:, :, key_length - query_length: key_length, :key_length]
            mask_value = float(np.finfo(mindspore.dtype_to_nptype(attn_weights.dtype)).min)
            mask_value = ops.full([], mask_value, dtype=attn_weights.dtype)
            attn_weights = ops.where(causal_mask, attn_weights.astype(attn_weights.dtype), mask_value)
        if attention_mask is not None:
            attn_weights = attn_weights + attention_mask
        attn_weights = ops.softmax(attn_weights, axis=-1)
        attn_weights = attn_weights.astype(value.dtype)
        attn_weights = self.attn_dropout(attn_weights)
        if head_mask is not None:
            attn_weights = attn_weights * head_mask
        attn_output = ops.matmul(attn_weights, value)
        return attn_output, attn_weights

    def _split_heads(self, tensor, num_heads, attn_head_size):
        new_shape = tensor.shape[:-1] + (num_heads, attn_head_size)
        tensor = tensor.view(new_shape)
        return tensor.permute(0, 2, 1, 3)

    def _merge_heads(self, tensor, num_heads, attn_head_size):
        tensor = tensor.permute(0, 2, 1, 3)
        new_shape = tensor.shape[:-2] + (num_heads * attn_head_size,)
        return tensor.view(new_shape)

    def construct(self, hidden_states, layer_past=None, attention_mask=None, head_mask=None,
                  encoder_hidden_states=None, encoder_attention_mask=None, use_cache=False,
                  output_attentions=False):
        if encoder_hidden_states is not None:
            if not hasattr(self, "q_attn"):
                raise ValueError("If class is used as cross attention, the weights `q_attn` have to be defined.")
            query = self.q_attn(hidden_states)
            key, value = self.c_attn(encoder_hidden_states).split(self.split_size, axis=2)
            attention_mask = encoder_attention_mask
        else:
            query, key, value = self.c_attn(hidden_states).split(self.split_size, axis=2)
        query = self._split_heads(query, self.num_heads, self.head_dim)
        key = self._split_heads(key, self.num_heads, self.head_dim)
        value = self._split_heads(value, self.num_heads, self.head_dim)
        present = None
        attn_output, attn_weights = self._attn(query, key, value, attention_mask, head_mask)
        attn_output = self._merge_heads(attn_output, self.num_heads, self.head_dim)
        attn_output = self.c_proj(attn_output)
        attn_output = self.resid_dropout(attn_output)
        outputs = (attn_output, present)
        if output_attentions:
            outputs += (attn_weights,)
        return outputs


class GPT2MLP(nn.Cell):
    def __init__(self, intermediate_size, config):
        super().__init__()
        embed_dim = config.hidden_size
        self.c_fc = Conv1D(intermediate_size, embed_dim)
        self.c_proj = Conv1D(embed_dim, intermediate_size)
        self.act = ACT2FN[config.activation_function]()
        self.dropout = nn.Dropout(p=config.resid_pdrop)

    def construct(self, hidden_states):
        hidden_states = self.c_fc(hidden_states)
        hidden_states = self.act(hidden_states)
        hidden_states = self.c_proj(hidden_states)
        hidden_states = self.dropout(hidden_states)
        return hidden_states


class GPT2Block(nn.Cell):
    def __init__(self, config, layer_idx=None):
        super().__init__()
        hidden_size = config.hidden_size
        inner_dim = config.n_inner if config.n_inner is not None else 4 * hidden_size
        self.ln_1 = nn.LayerNorm((hidden_size,), epsilon=config.layer_norm_epsilon)
        self.attn = GPT2Attention(config, layer_idx=layer_idx)
        self.ln_2 = nn.LayerNorm((hidden_size,), epsilon=config.layer_norm_epsilon)
        if config.add_cross_attention:
            self.crossattention = GPT2Attention(config, is_cross_attention=True, layer_idx=layer_idx)
            self.ln_cross_attn = nn.LayerNorm((hidden_size,), epsilon=config.layer_norm_epsilon)
        self.mlp = GPT2MLP(inner_dim, config)

    def construct(self, hidden_states, layer_past=None, attention_mask=None, head_mask=None,
                  encoder_hidden_states=None, encoder_attention_mask=None, use_cache=False,
                  output_attentions=False):
        residual = hidden_states
        hidden_states = self.ln_1(hidden_states)
        attn_outputs = self.attn(hidden_states, layer_past=layer_past, attention_mask=attention_mask,
                                 head_mask=head_mask, use_cache=use_cache, output_attentions=output_attentions)
        attn_output = attn_outputs[0]
        outputs = attn_outputs[1:]
        hidden_states = attn_output + residual
        if encoder_hidden_states is not None:
            if not hasattr(self, "crossattention"):
                raise ValueError("If `encoder_hidden_states` are passed, the block has to be instantiated with "
                                 "cross-attention layers by setting `config.add_cross_attention=True`")
        residual = hidden_states
        hidden_states = self.ln_2(hidden_states)
        feed_forward_hidden_states = self.mlp(hidden_states)
        hidden_states = residual + feed_forward_hidden_states
        if use_cache:
            outputs = (hidden_states,) + outputs
        else:
            outputs = (hidden_states,) + outputs[1:]
        return outputs


class GPT2Model(nn.Cell):
    def __init__(self, config):
        super().__init__()
        self.config = config
        self.embed_dim = config.hidden_size
        self.wte = nn.Embedding(config.vocab_size, self.embed_dim, embedding_table=Normal(config.initializer_range))
        self.wpe = nn.Embedding(config.max_position_embeddings, self.embed_dim,
                                embedding_table=Normal(config.initializer_range))
        self.drop = nn.Dropout(p=config.embd_pdrop)
        self.h = nn.CellList([GPT2Block(config, layer_idx=i) for i in range(config.n_layer)])
        self.ln_f = nn.LayerNorm((self.embed_dim,), epsilon=config.layer_norm_epsilon)

    def get_head_mask(self, head_mask, num_hidden_layers):
        return [None] * num_hidden_layers if head_mask is None else head_mask

    @property
    def dtype(self):
        return mindspore.float32

    def construct(self, input_ids, attention_mask=None):
        input_shape = input_ids.shape
        input_ids = input_ids.view(-1, input_shape[-1])
        batch_size = input_ids.shape[0]
        past_length = 0
        past_key_values = tuple([None] * len(self.h))
        position_ids = ops.arange(past_length, input_shape[-1] + past_length, dtype=mindspore.int64)
        position_ids = position_ids.unsqueeze(0)
        if attention_mask is not None:
            attention_mask = attention_mask.view(batch_size, -1)
            attention_mask = attention_mask[:, None, None, :]
            attention_mask = attention_mask.to(dtype=self.dtype)
            attention_mask = (1.0 - attention_mask) * float(np.finfo(mindspore.dtype_to_nptype(self.dtype)).min)
        head_mask = self.get_head_mask(None, self.config.n_layer)
        inputs_embeds = self.wte(input_ids)
        position_embeds = self.wpe(position_ids)
        hidden_states = inputs_embeds + position_embeds
        hidden_states = self.drop(hidden_states)
        output_shape = (-1,) + input_shape[1:] + (hidden_states.shape[-1],)
        for i, (block, layer_past) in enumerate(zip(self.h, past_key_values)):
            outputs = block(hidden_states, layer_past=layer_past, attention_mask=attention_mask,
                            head_mask=head_mask[i])
            hidden_states = outputs[0]
        hidden_states = self.ln_f(hidden_states)
        hidden_states = hidden_states.view(output_shape)
        return hidden_states
