"""BERT as MindSpore's official model writes it, trimmed to inference.

Mirrors mindspore-ai/models, official/nlp/Bert/src/bert_model.py (commit b99f5d7): the same
Cells (EmbeddingPostprocessor, BertAttention, BertOutput, SaturateCast, BertEncoderCell,
BertTransformer, CreateAttentionMaskFromInputMask, BertModel), constructor arguments,
primitives and construct-time idioms — ``F.shape``, ``self.position_ids[:, :shape[1]]``,
``F.depend``, ``F.tuple_to_array((1.0,))``, ``P.DType``, ``P.StridedSlice`` with the batch size
read from ``P.Shape()``, ``mstype.dtype_to_nptype``, ``.to_float`` — written again here, not
copied; with ``use_relative_positions`` the RelaPosMatrixGenerator builds its distance matrix from
``F.tuple_to_array(F.make_range(length))``, P.Tile and ``C.clip_by_value``. With
``use_one_hot_embeddings`` the word and token-type lookups are nn.Embedding's OneHot + MatMul, the
relative-position table ``ops.one_hot`` + BatchMatMul, and the file's EmbeddingLookup (OneHot +
MatMul, or Gather) is here too. Left out: dropout in training (the model runs with
is_training=False). Runs under ``msvm.as_mindspore()``.
"""

import copy
import math

import mindspore.common.dtype as mstype
import mindspore.nn as nn
import mindspore.ops as ops
import mindspore.ops.functional as F
import numpy as np
from mindspore.common.initializer import TruncatedNormal, initializer
from mindspore.common.parameter import Parameter
from mindspore.common.tensor import Tensor
from mindspore.ops import composite as C
from mindspore.ops import operations as P


class BertConfig:
    def __init__(self, seq_length=128, vocab_size=32000, hidden_size=768, num_hidden_layers=12,
                 num_attention_heads=12, intermediate_size=3072, hidden_act="gelu", hidden_dropout_prob=0.1,
                 attention_probs_dropout_prob=0.1, max_position_embeddings=512, type_vocab_size=16,
                 initializer_range=0.02, use_relative_positions=False, dtype=mstype.float32,
                 compute_type=mstype.float32):
        self.seq_length = seq_length
        self.vocab_size = vocab_size
        self.hidden_size = hidden_size
        self.num_hidden_layers = num_hidden_layers
        self.num_attention_heads = num_attention_heads
        self.hidden_act = hidden_act
        self.intermediate_size = intermediate_size
        self.hidden_dropout_prob = hidden_dropout_prob
        self.attention_probs_dropout_prob = attention_probs_dropout_prob
        self.max_position_embeddings = max_position_embeddings
        self.type_vocab_size = type_vocab_size
        self.initializer_range = initializer_range
        self.use_relative_positions = use_relative_positions
        self.dtype = dtype
        self.compute_type = compute_type


class EmbeddingLookup(nn.Cell):
    """The word-embedding table: OneHot + MatMul with use_one_hot_embeddings, else Gather;
    returns the embeddings [-1, seq, E] and the table."""

    def __init__(self, vocab_size, embedding_size, embedding_shape, use_one_hot_embeddings=False,
                 initializer_range=0.02):
        super().__init__()
        self.vocab_size = vocab_size
        self.use_one_hot_embeddings = use_one_hot_embeddings
        self.embedding_table = Parameter(initializer(TruncatedNormal(initializer_range),
                                                     [vocab_size, embedding_size]))
        self.expand = P.ExpandDims()
        self.shape_flat = (-1,)
        self.gather = P.Gather()
        self.one_hot = P.OneHot()
        self.on_value = Tensor(1.0, mstype.float32)
        self.off_value = Tensor(0.0, mstype.float32)
        self.array_mul = P.MatMul()
        self.reshape = P.Reshape()
        self.shape = tuple(embedding_shape)

    def construct(self, input_ids):
        extended_ids = self.expand(input_ids, -1)
        flat_ids = self.reshape(extended_ids, self.shape_flat)
        if self.use_one_hot_embeddings:
            one_hot_ids = self.one_hot(flat_ids, self.vocab_size, self.on_value, self.off_value)
            output_for_reshape = self.array_mul(one_hot_ids, self.embedding_table)
        else:
            output_for_reshape = self.gather(self.embedding_table, flat_ids, 0)
        output = self.reshape(output_for_reshape, self.shape)
        return output, self.embedding_table.value()


class EmbeddingPostprocessor(nn.Cell):
    """Adds token type and position embeddings to the word embeddings, then LayerNorm."""

    def __init__(self, embedding_size, embedding_shape, use_relative_positions=False, use_token_type=False,
                 token_type_vocab_size=16, use_one_hot_embeddings=False, initializer_range=0.02,
                 max_position_embeddings=512, dropout_prob=0.1):
        super().__init__()
        self.use_token_type = use_token_type
        self.token_type_vocab_size = token_type_vocab_size
        self.max_position_embeddings = max_position_embeddings
        self.token_type_embedding = nn.Embedding(vocab_size=token_type_vocab_size, embedding_size=embedding_size,
                                                 use_one_hot=use_one_hot_embeddings)
        self.shape = tuple(embedding_shape)
        self.dropout = nn.Dropout(p=dropout_prob)
        self.use_relative_positions = use_relative_positions
        _, seq, _ = self.shape
        self.full_position_embedding = nn.Embedding(vocab_size=max_position_embeddings,
                                                    embedding_size=embedding_size, use_one_hot=False)
        self.layernorm = nn.LayerNorm((embedding_size,))
        # the table of positions is built for the config's seq_length and sliced to the input's length
        self.position_ids = Tensor(np.arange(seq).reshape(-1, seq).astype(np.int32))
        self.add = P.Add()

    def construct(self, token_type_ids, word_embeddings):
        output = word_embeddings
        if self.use_token_type:
            token_type_embeddings = self.token_type_embedding(token_type_ids)
            output = self.add(output, token_type_embeddings)
        if not self.use_relative_positions:
            shape = F.shape(output)
            position_ids = self.position_ids[:, :shape[1]]
            position_embeddings = self.full_position_embedding(position_ids)
            output = self.add(output, position_embeddings)
        output = self.layernorm(output)
        output = self.dropout(output)
        return output


class BertOutput(nn.Cell):
    """Dense, residual add, LayerNorm."""

    def __init__(self, in_channels, out_channels, initializer_range=0.02, dropout_prob=0.1,
                 compute_type=mstype.float32):
        super().__init__()
        self.dense = nn.Dense(in_channels, out_channels,
                              weight_init=TruncatedNormal(initializer_range)).to_float(compute_type)
        self.dropout = nn.Dropout(p=dropout_prob)
        self.add = P.Add()
        self.layernorm = nn.LayerNorm((out_channels,)).to_float(compute_type)
        self.cast = P.Cast()

    def construct(self, hidden_status, input_tensor):
        output = self.dense(hidden_status)
        output = self.dropout(output)
        output = self.add(input_tensor, output)
        output = self.layernorm(output)
        return output


class RelaPosMatrixGenerator(nn.Cell):
    """The matrix of clipped relative distances j - i between positions, shifted to be >= 0."""

    def __init__(self, max_relative_position):
        super().__init__()
        self._max_relative_position = max_relative_position
        self._min_relative_position = -max_relative_position
        self.tile = P.Tile()
        self.range_mat = P.Reshape()
        self.sub = P.Sub()
        self.expanddims = P.ExpandDims()
        self.cast = P.Cast()

    def construct(self, length):
        range_vec_row_out = self.cast(F.tuple_to_array(F.make_range(length)), mstype.int32)
        range_vec_col_out = self.range_mat(range_vec_row_out, (length, -1))
        tile_row_out = self.tile(range_vec_row_out, (length,))
        tile_col_out = self.tile(range_vec_col_out, (1, length))
        range_mat_out = self.range_mat(tile_row_out, (length, length))
        transpose_out = self.range_mat(tile_col_out, (length, length))
        distance_mat = self.sub(range_mat_out, transpose_out)
        distance_mat_clipped = C.clip_by_value(distance_mat, self._min_relative_position,
                                               self._max_relative_position)
        final_mat = distance_mat_clipped + self._max_relative_position
        return final_mat


class RelaPosEmbeddingsGenerator(nn.Cell):
    """[length, length, depth] embeddings of the relative positions."""

    def __init__(self, depth, max_relative_position, initializer_range, use_one_hot_embeddings=False):
        super().__init__()
        self.depth = depth
        self.vocab_size = max_relative_position * 2 + 1
        self.use_one_hot_embeddings = use_one_hot_embeddings
        self.embeddings_table = Parameter(initializer(TruncatedNormal(initializer_range),
                                                      [self.vocab_size, self.depth]), "embeddings_table")
        self.relative_positions_matrix = RelaPosMatrixGenerator(max_relative_position=max_relative_position)
        self.reshape = P.Reshape()
        self.shape = P.Shape()
        self.gather = P.Gather()
        self.matmul = P.BatchMatMul()

    def construct(self, length):
        relative_positions_matrix_out = self.relative_positions_matrix(length)
        if self.use_one_hot_embeddings:
            flat_relative_positions_matrix = self.reshape(relative_positions_matrix_out, (-1,))
            one_hot_relative_positions_matrix = ops.one_hot(flat_relative_positions_matrix, self.vocab_size, 1.0, 0.0)
            embeddings = self.matmul(one_hot_relative_positions_matrix, self.embeddings_table)
            my_shape = self.shape(relative_positions_matrix_out) + (self.depth,)
            embeddings = self.reshape(embeddings, my_shape)
        else:
            embeddings = self.gather(self.embeddings_table, relative_positions_matrix_out, 0)
        return embeddings


class SaturateCast(nn.Cell):
    """Clamps to the target type's finite range, then casts."""

    def __init__(self, src_type=mstype.float32, dst_type=mstype.float32):
        super().__init__()
        np_type = mstype.dtype_to_nptype(dst_type)
        self.tensor_min_type = float(np.finfo(np_type).min)
        self.tensor_max_type = float(np.finfo(np_type).max)
        self.min_op = P.Minimum()
        self.max_op = P.Maximum()
        self.cast = P.Cast()
        self.dst_type = dst_type

    def construct(self, x):
        out = self.max_op(x, self.tensor_min_type)
        out = self.min_op(out, self.tensor_max_type)
        return self.cast(out, self.dst_type)


class BertAttention(nn.Cell):
    """Multi-head attention from a 2-D from_tensor to a 2-D to_tensor, with the input-mask adder."""

    def __init__(self, from_tensor_width, to_tensor_width, num_attention_heads=1, size_per_head=512,
                 query_act=None, key_act=None, value_act=None, has_attention_mask=False,
                 attention_probs_dropout_prob=0.0, use_one_hot_embeddings=False, initializer_range=0.02,
                 use_relative_positions=False, compute_type=mstype.float32):
        super().__init__()
        self.num_attention_heads = num_attention_heads
        self.size_per_head = size_per_head
        self.has_attention_mask = has_attention_mask
        self.use_relative_positions = use_relative_positions
        self.scores_mul = 1.0 / math.sqrt(float(self.size_per_head))
        self.reshape = P.Reshape()
        self.shape_from_2d = (-1, from_tensor_width)
        self.shape_to_2d = (-1, to_tensor_width)
        weight = TruncatedNormal(initializer_range)
        units = num_attention_heads * size_per_head
        self.query_layer = nn.Dense(from_tensor_width, units, activation=query_act,
                                    weight_init=weight).to_float(compute_type)
        self.key_layer = nn.Dense(to_tensor_width, units, activation=key_act,
                                  weight_init=weight).to_float(compute_type)
        self.value_layer = nn.Dense(to_tensor_width, units, activation=value_act,
                                    weight_init=weight).to_float(compute_type)
        self.matmul_trans_b = P.BatchMatMul(transpose_b=True)
        self.multiply = P.Mul()
        self.transpose = P.Transpose()
        self.trans_shape = (0, 2, 1, 3)
        self.trans_shape_relative = (2, 0, 1, 3)
        self.trans_shape_position = (1, 2, 0, 3)
        self.multiply_data = -10000.0
        self.matmul = P.BatchMatMul()
        self.softmax = nn.Softmax()
        self.dropout = nn.Dropout(p=attention_probs_dropout_prob)
        if self.has_attention_mask:
            self.expand_dims = P.ExpandDims()
            self.sub = P.Sub()
            self.add = P.Add()
            self.cast = P.Cast()
            self.get_dtype = P.DType()
        self.shape_return = (-1, num_attention_heads * size_per_head)
        self.cast_compute_type = SaturateCast(dst_type=compute_type)
        if self.use_relative_positions:
            self._generate_relative_positions_embeddings = RelaPosEmbeddingsGenerator(
                depth=size_per_head, max_relative_position=16, initializer_range=initializer_range,
                use_one_hot_embeddings=use_one_hot_embeddings)

    def construct(self, from_tensor, to_tensor, attention_mask):
        shape_from = F.shape(attention_mask)[2]
        from_tensor = F.depend(from_tensor, shape_from)
        from_tensor_2d = self.reshape(from_tensor, self.shape_from_2d)
        to_tensor_2d = self.reshape(to_tensor, self.shape_to_2d)
        query_out = self.query_layer(from_tensor_2d)
        key_out = self.key_layer(to_tensor_2d)
        value_out = self.value_layer(to_tensor_2d)

        query_layer = self.reshape(query_out, (-1, shape_from, self.num_attention_heads, self.size_per_head))
        query_layer = self.transpose(query_layer, self.trans_shape)
        key_layer = self.reshape(key_out, (-1, shape_from, self.num_attention_heads, self.size_per_head))
        key_layer = self.transpose(key_layer, self.trans_shape)

        attention_scores = self.matmul_trans_b(query_layer, key_layer)

        if self.use_relative_positions:
            # relations_keys [F, F, H]; query_layer_t [F, B, N, H]; query_layer_r [F, B * N, H]
            relations_keys = self._generate_relative_positions_embeddings(shape_from)
            relations_keys = self.cast_compute_type(relations_keys)
            query_layer_t = self.transpose(query_layer, self.trans_shape_relative)
            query_layer_r = self.reshape(query_layer_t, (shape_from, -1, self.size_per_head))
            key_position_scores = self.matmul_trans_b(query_layer_r, relations_keys)
            key_position_scores_r = self.reshape(key_position_scores,
                                                 (shape_from, -1, self.num_attention_heads, shape_from))
            key_position_scores_r_t = self.transpose(key_position_scores_r, self.trans_shape_position)
            attention_scores = attention_scores + key_position_scores_r_t

        attention_scores = self.multiply(self.scores_mul, attention_scores)

        if self.has_attention_mask:
            attention_mask = self.expand_dims(attention_mask, 1)
            multiply_out = self.sub(self.cast(F.tuple_to_array((1.0,)), self.get_dtype(attention_scores)),
                                    self.cast(attention_mask, self.get_dtype(attention_scores)))
            adder = self.multiply(multiply_out, self.multiply_data)
            attention_scores = self.add(adder, attention_scores)

        attention_probs = self.softmax(attention_scores)
        attention_probs = self.dropout(attention_probs)

        value_layer = self.reshape(value_out, (-1, shape_from, self.num_attention_heads, self.size_per_head))
        value_layer = self.transpose(value_layer, self.trans_shape)
        context_layer = self.matmul(attention_probs, value_layer)

        if self.use_relative_positions:
            # relations_values [F, F, H]; attention_probs_r [F, B * N, T]
            relations_values = self._generate_relative_positions_embeddings(shape_from)
            relations_values = self.cast_compute_type(relations_values)
            attention_probs_t = self.transpose(attention_probs, self.trans_shape_relative)
            attention_probs_r = self.reshape(attention_probs_t, (shape_from, -1, shape_from))
            value_position_scores = self.matmul(attention_probs_r, relations_values)
            value_position_scores_r = self.reshape(value_position_scores,
                                                   (shape_from, -1, self.num_attention_heads, self.size_per_head))
            value_position_scores_r_t = self.transpose(value_position_scores_r, self.trans_shape_position)
            context_layer = context_layer + value_position_scores_r_t

        context_layer = self.transpose(context_layer, self.trans_shape)
        context_layer = self.reshape(context_layer, self.shape_return)
        return context_layer


class BertSelfAttention(nn.Cell):
    def __init__(self, hidden_size, num_attention_heads=12, attention_probs_dropout_prob=0.1,
                 use_one_hot_embeddings=False, initializer_range=0.02, hidden_dropout_prob=0.1,
                 use_relative_positions=False, compute_type=mstype.float32):
        super().__init__()
        if hidden_size % num_attention_heads != 0:
            raise ValueError(f"The hidden size ({hidden_size}) is not a multiple of the number "
                             f"of attention heads ({num_attention_heads})")
        self.size_per_head = int(hidden_size / num_attention_heads)
        self.attention = BertAttention(
            from_tensor_width=hidden_size, to_tensor_width=hidden_size, num_attention_heads=num_attention_heads,
            size_per_head=self.size_per_head, attention_probs_dropout_prob=attention_probs_dropout_prob,
            use_one_hot_embeddings=use_one_hot_embeddings, initializer_range=initializer_range,
            use_relative_positions=use_relative_positions, has_attention_mask=True, compute_type=compute_type)
        self.output = BertOutput(in_channels=hidden_size, out_channels=hidden_size,
                                 initializer_range=initializer_range, dropout_prob=hidden_dropout_prob,
                                 compute_type=compute_type)
        self.reshape = P.Reshape()
        self.shape = (-1, hidden_size)

    def construct(self, input_tensor, attention_mask):
        attention_output = self.attention(input_tensor, input_tensor, attention_mask)
        output = self.output(attention_output, input_tensor)
        return output


class BertEncoderCell(nn.Cell):
    def __init__(self, hidden_size=768, num_attention_heads=12, intermediate_size=3072,
                 attention_probs_dropout_prob=0.02, use_one_hot_embeddings=False, initializer_range=0.02,
                 hidden_dropout_prob=0.1, use_relative_positions=False, hidden_act="gelu",
                 compute_type=mstype.float32):
        super().__init__()
        self.attention = BertSelfAttention(
            hidden_size=hidden_size, num_attention_heads=num_attention_heads,
            attention_probs_dropout_prob=attention_probs_dropout_prob, use_one_hot_embeddings=use_one_hot_embeddings,
            initializer_range=initializer_range, hidden_dropout_prob=hidden_dropout_prob,
            use_relative_positions=use_relative_positions, compute_type=compute_type)
        self.intermediate = nn.Dense(in_channels=hidden_size, out_channels=intermediate_size, activation=hidden_act,
                                     weight_init=TruncatedNormal(initializer_range)).to_float(compute_type)
        self.output = BertOutput(in_channels=intermediate_size, out_channels=hidden_size,
                                 initializer_range=initializer_range, dropout_prob=hidden_dropout_prob,
                                 compute_type=compute_type)

    def construct(self, hidden_states, attention_mask):
        attention_output = self.attention(hidden_states, attention_mask)
        intermediate_output = self.intermediate(attention_output)
        output = self.output(intermediate_output, attention_output)
        return output


class BertTransformer(nn.Cell):
    def __init__(self, hidden_size, num_hidden_layers, num_attention_heads=12, intermediate_size=3072,
                 attention_probs_dropout_prob=0.1, use_one_hot_embeddings=False, initializer_range=0.02,
                 hidden_dropout_prob=0.1, use_relative_positions=False, hidden_act="gelu",
                 compute_type=mstype.float32, return_all_encoders=False):
        super().__init__()
        self.return_all_encoders = return_all_encoders
        layers = []
        for _ in range(num_hidden_layers):
            layers.append(BertEncoderCell(
                hidden_size=hidden_size, num_attention_heads=num_attention_heads,
                intermediate_size=intermediate_size, attention_probs_dropout_prob=attention_probs_dropout_prob,
                use_one_hot_embeddings=use_one_hot_embeddings, initializer_range=initializer_range,
                hidden_dropout_prob=hidden_dropout_prob, use_relative_positions=use_relative_positions,
                hidden_act=hidden_act, compute_type=compute_type))
        self.layers = nn.CellList(layers)
        self.reshape = P.Reshape()
        self.shape = (-1, hidden_size)

    def construct(self, input_tensor, attention_mask):
        prev_output = self.reshape(input_tensor, self.shape)
        all_encoder_layers = ()
        for layer_module in self.layers:
            layer_output = layer_module(prev_output, attention_mask)
            prev_output = layer_output
            if self.return_all_encoders:
                shape = F.shape(input_tensor)
                layer_output = self.reshape(layer_output, shape)
                all_encoder_layers = all_encoder_layers + (layer_output,)
        if not self.return_all_encoders:
            shape = F.shape(input_tensor)
            prev_output = self.reshape(prev_output, shape)
            all_encoder_layers = all_encoder_layers + (prev_output,)
        return all_encoder_layers


class CreateAttentionMaskFromInputMask(nn.Cell):
    def __init__(self, config):
        super().__init__()
        self.input_mask = None
        self.cast = P.Cast()
        self.reshape = P.Reshape()

    def construct(self, input_mask):
        seq_length = F.shape(input_mask)[1]
        attention_mask = self.cast(self.reshape(input_mask, (-1, 1, seq_length)), mstype.float32)
        return attention_mask


class BertModel(nn.Cell):
    """Embeddings, the encoder stack and the tanh pooler over the first token."""

    def __init__(self, config, is_training, use_one_hot_embeddings=False):
        super().__init__()
        config = copy.deepcopy(config)
        if not is_training:
            config.hidden_dropout_prob = 0.0
            config.attention_probs_dropout_prob = 0.0
        self.hidden_size = config.hidden_size
        self.num_hidden_layers = config.num_hidden_layers
        self.embedding_size = config.hidden_size
        self.token_type_ids = None
        self.last_idx = self.num_hidden_layers - 1
        output_embedding_shape = [-1, config.seq_length, self.embedding_size]
        self.bert_embedding_lookup = nn.Embedding(vocab_size=config.vocab_size, embedding_size=self.embedding_size,
                                                  use_one_hot=use_one_hot_embeddings,
                                                  embedding_table=TruncatedNormal(config.initializer_range))
        self.bert_embedding_postprocessor = EmbeddingPostprocessor(
            embedding_size=self.embedding_size, embedding_shape=output_embedding_shape,
            use_relative_positions=config.use_relative_positions, use_token_type=True,
            token_type_vocab_size=config.type_vocab_size, use_one_hot_embeddings=use_one_hot_embeddings,
            initializer_range=0.02, max_position_embeddings=config.max_position_embeddings,
            dropout_prob=config.hidden_dropout_prob)
        self.bert_encoder = BertTransformer(
            hidden_size=self.hidden_size, num_attention_heads=config.num_attention_heads,
            num_hidden_layers=self.num_hidden_layers, intermediate_size=config.intermediate_size,
            attention_probs_dropout_prob=config.attention_probs_dropout_prob,
            use_one_hot_embeddings=use_one_hot_embeddings, initializer_range=config.initializer_range,
            hidden_dropout_prob=config.hidden_dropout_prob, use_relative_positions=config.use_relative_positions,
            hidden_act=config.hidden_act, compute_type=config.compute_type, return_all_encoders=True)
        self.cast = P.Cast()
        self.dtype = config.dtype
        self.cast_compute_type = SaturateCast(dst_type=config.compute_type)
        self.slice = P.StridedSlice()
        self.squeeze_1 = P.Squeeze(axis=1)
        self.dense = nn.Dense(self.hidden_size, self.hidden_size, activation="tanh",
                              weight_init=TruncatedNormal(config.initializer_range)).to_float(config.compute_type)
        self._create_attention_mask_from_input_mask = CreateAttentionMaskFromInputMask(config)

    def construct(self, input_ids, token_type_ids, input_mask):
        embedding_tables = self.bert_embedding_lookup.embedding_table
        word_embeddings = self.bert_embedding_lookup(input_ids)
        embedding_output = self.bert_embedding_postprocessor(token_type_ids, word_embeddings)
        attention_mask = self._create_attention_mask_from_input_mask(input_mask)
        encoder_output = self.bert_encoder(self.cast_compute_type(embedding_output), attention_mask)
        sequence_output = self.cast(encoder_output[self.last_idx], self.dtype)
        batch_size = P.Shape()(input_ids)[0]
        sequence_slice = self.slice(sequence_output, (0, 0, 0), (batch_size, 1, self.hidden_size), (1, 1, 1))
        first_token = self.squeeze_1(sequence_slice)
        pooled_output = self.dense(first_token)
        pooled_output = self.cast(pooled_output, self.dtype)
        return sequence_output, pooled_output, embedding_tables
